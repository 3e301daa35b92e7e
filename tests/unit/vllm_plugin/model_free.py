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
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from tests.vllm_upstream.fake_hub import fake_models, write_model

EOS_TOKEN_ID = 50256  # vLLM's test helpers'
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
) -> Any:
    """`scheduler_cls(vllm_config=..., ...)` as vLLM's `create_scheduler` calls it: chunked prefill, no
    prefix caching, no watermark, FCFS, a context of `max_num_batched_tokens` tokens."""
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
        policy="fcfs",
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
    return scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )


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
