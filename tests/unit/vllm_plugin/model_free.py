"""A vLLM V1 scheduler without a model, built from the installed vllm package alone.

What vLLM's own scheduler tests build with their `create_scheduler` and `create_requests` helpers (in
its source tree, `tests/v1/core/utils.py`), reduced to what the plug-in's contract checks use: the
model's `config.json` (a fake facebook/opt-125m from `tests/vllm_upstream/fake_hub`, no weights, no
tokenizer loaded), one full-attention KV cache group of `num_blocks` blocks and the config classes of
the installed release.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.multimodal.inputs import MultiModalFeatureSpec, MultiModalKwargsItem, PlaceholderRange
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY
from tests.vllm_upstream.fake_hub import fake_models, write_model

EOS_TOKEN_ID = 50256  # vLLM's test helpers'
NUM_CLASSES = 3  # the modality classifier's: text, image, video
OPT = "facebook/opt-125m"


def write_opt_model(folder: Path) -> Path:
    """The fake facebook/opt-125m's files (config and tokenizer) in `folder`; its snapshot folder."""
    (model,) = (m for m in fake_models() if m.repo_id == OPT)
    return write_model(folder, model)


def create_scheduler(
    model: Path,
    scheduler_cls: Callable[..., Any],
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_blocks: int,
    block_size: int,
    async_scheduling: bool,
    encoder_budget: int = 0,
    policy: str = "fcfs",
) -> Any:
    """`scheduler_cls(vllm_config=..., ...)` as vLLM's `create_scheduler` calls it: chunked prefill, no
    prefix caching, no watermark, a context of `max_num_batched_tokens` tokens, vLLM's `policy`. The
    fake model has no vision encoder, so vLLM gives it no encoder budget and never schedules a request
    with an image; `encoder_budget` tokens of encoder compute and cache let it, as a multimodal
    model's would."""
    model_config = ModelConfig(
        model=str(model), trust_remote_code=True, dtype="float16", seed=42, skip_tokenizer_init=True
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_num_batched_tokens,
        long_prefill_token_threshold=0,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        is_encoder_decoder=model_config.is_encoder_decoder,
        watermark=0.0,
        policy=policy,
    )
    cache_config = CacheConfig(block_size=block_size, cache_dtype="auto", enable_prefix_caching=False)
    cache_config.num_gpu_blocks = num_blocks
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config
    )
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)]
    )
    register_all_kvcache_specs(vllm_config)
    scheduler = scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )
    if encoder_budget:
        scheduler.max_num_encoder_input_tokens = encoder_budget
        scheduler.encoder_cache_manager = EncoderCacheManager(cache_size=encoder_budget)
    return scheduler


def create_request(
    request_id: str,
    num_tokens: int,
    max_tokens: int,
    mm_positions: list[PlaceholderRange] | None = None,
    block_size: int = 16,
) -> Request:
    """One request of `num_tokens` prompt tokens, each placeholder range an image's, as vLLM's
    `create_requests` builds them."""
    init_none_hash(sha256)
    sampling_params = SamplingParams(max_tokens=max_tokens)
    sampling_params.update_from_generation_config({}, EOS_TOKEN_ID)
    features = [
        MultiModalFeatureSpec(
            data=MultiModalKwargsItem.dummy(),
            mm_position=position,
            identifier=f"{request_id}-{j}",
            modality="image",
        )
        for j, position in enumerate(mm_positions or [])
    ]
    return Request(
        request_id=request_id,
        prompt_token_ids=[0] * num_tokens,
        sampling_params=sampling_params,
        pooling_params=None,
        mm_features=features or None,
        block_hasher=get_request_block_hasher(block_size, sha256),
    )


def classed_request(
    request_id: str,
    level: int,
    tokens: int,
    max_tokens: int = 16,
    image_tokens: int = 0,
    est_prefill_s: float | None = None,
) -> Request:
    """A request whose caller supplies its class (and with `est_prefill_s` its estimated prefill), as
    the Triton ensemble does; with `image_tokens`, an image's placeholders at the start of its prompt
    (its prefill then runs the encoder)."""
    positions = [PlaceholderRange(offset=0, length=image_tokens)] if image_tokens else None
    request = create_request(request_id, tokens, max_tokens, positions)
    supplied: dict[str, Any] = {"class_level": level, "num_classes": NUM_CLASSES}
    if est_prefill_s is not None:
        supplied["est_prefill_s"] = est_prefill_s
    request.sampling_params.extra_args = {EXTRA_ARGS_KEY: supplied}
    return request


def feed(scheduler: Any, output: Any) -> None:
    """One sampled token for every request whose prompt the step completed, none for partial prefills."""
    ids = list(output.num_scheduled_tokens)
    sampled = []
    for request_id in ids:
        request = scheduler.requests[request_id]
        sampled.append([0] if request.num_computed_tokens >= request.num_prompt_tokens else [])
    scheduler.update_from_output(
        output,
        ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={request_id: i for i, request_id in enumerate(ids)},
            sampled_token_ids=sampled,
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=[],
        ),
    )
