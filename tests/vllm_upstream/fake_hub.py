"""An offline Hugging Face hub cache with the configs and tokenizers vLLM's scheduler tests ask for.

The scheduler tests build a `ModelConfig` for a hub model name but never load weights: they need its
`config.json` (architecture, context length, multimodal layout) and, unless they skip it, a tokenizer.
The configs below are the published ones reduced to the fields vLLM reads; the tokenizers are word-level
ones generated here, with each model's special tokens at their real ids. They are written in the hub's
cache layout (`models--org--name/snapshots/<commit>/`, `refs/main`), so that with `HF_HUB_OFFLINE=1`
vLLM and transformers resolve the names exactly as they would with a downloaded cache.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_OPT_COMMON: dict[str, Any] = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "activation_function": "relu",
    "attention_dropout": 0.0,
    "dropout": 0.1,
    "enable_bias": True,
    "layer_norm_elementwise_affine": True,
    "max_position_embeddings": 2048,
    "vocab_size": 50272,
    "bos_token_id": 2,
    "eos_token_id": 2,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "use_cache": True,
}

_OPT_SPECIALS = {"<pad>": 1, "</s>": 2, "<unk>": 3}

_LLAMA_SPECIALS = {"<unk>": 0, "<s>": 1, "</s>": 2, "<image>": 32000, "<pad>": 32001}

_QWEN_SPECIALS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
# What the LLaVA and Qwen-VL image processors share: RGB, rescaled, resized, CLIP-normalized.
_CLIP_IMAGE_PROCESSING: dict[str, Any] = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": _CLIP_MEAN,
    "image_std": _CLIP_STD,
}


@dataclass(frozen=True)
class FakeModel:
    """One hub repository: its config, tokenizer specials and any extra JSON files (processor configs)."""

    repo_id: str
    config: dict[str, Any]
    specials: dict[str, int]
    tokenizer_config: dict[str, Any]
    extra_files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def commit(self) -> str:
        """A stable fake commit hash, from the content, so that a changed config lands in a new snapshot."""
        payload = json.dumps([self.config, self.specials, self.tokenizer_config, self.extra_files])
        return hashlib.sha1(payload.encode(), usedforsecurity=False).hexdigest()


def _opt(repo_id: str, hidden: int, ffn: int, heads: int, layers: int, proj: int, pre_ln: bool) -> FakeModel:
    config = {
        **_OPT_COMMON,
        "hidden_size": hidden,
        "ffn_dim": ffn,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "word_embed_proj_dim": proj,
        "do_layer_norm_before": pre_ln,
        "_name_or_path": repo_id,
    }
    tokenizer = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": "</s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "</s>",
        "model_max_length": 1000000000000000019884624838656,
    }
    return FakeModel(repo_id, config, _OPT_SPECIALS, tokenizer)


def _llava() -> FakeModel:
    config = {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "ignore_index": -100,
        "image_token_index": 32000,
        "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "image_seq_length": 576,
        "vocab_size": 32064,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "text_config": {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 32,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0,
            "vocab_size": 32064,
            "pad_token_id": 32001,
            "torch_dtype": "float16",
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_act": "quick_gelu",
            "hidden_size": 1024,
            "image_size": 336,
            "intermediate_size": 4096,
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "projection_dim": 768,
            "vocab_size": 32000,
        },
    }
    tokenizer = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "model_max_length": 1000000000000000019884624838656,
        "processor_class": "LlavaProcessor",
    }
    image_processor = {
        "image_processor_type": "CLIPImageProcessor",
        "crop_size": {"height": 336, "width": 336},
        "do_center_crop": True,
        **_CLIP_IMAGE_PROCESSING,
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"shortest_edge": 336},
        "processor_class": "LlavaProcessor",
    }
    processor = {
        "processor_class": "LlavaProcessor",
        "image_token": "<image>",
        "num_additional_image_tokens": 1,
        "patch_size": 14,
        "vision_feature_select_strategy": "default",
    }
    extra = {"preprocessor_config.json": image_processor, "processor_config.json": processor}
    return FakeModel("llava-hf/llava-1.5-7b-hf", config, _LLAMA_SPECIALS, tokenizer, extra)


def _qwen2_5_vl() -> FakeModel:
    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "vision_token_id": 151654,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "max_position_embeddings": 128000,
        "max_window_layers": 70,
        "num_attention_heads": 16,
        "num_hidden_layers": 36,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "sliding_window": 32768,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
        "vision_config": {
            "depth": 32,
            "hidden_act": "silu",
            "hidden_size": 1280,
            "intermediate_size": 3420,
            "num_heads": 16,
            "in_chans": 3,
            "out_hidden_size": 2048,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
            "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
    }
    tokenizer = {
        "tokenizer_class": "Qwen2Tokenizer",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 131072,
        "processor_class": "Qwen2_5_VLProcessor",
    }
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
        **_CLIP_IMAGE_PROCESSING,
        "max_pixels": 12845056,
        "min_pixels": 3136,
        "merge_size": 2,
        "patch_size": 14,
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "temporal_patch_size": 2,
    }
    extra = {"preprocessor_config.json": image_processor}
    return FakeModel("Qwen/Qwen2.5-VL-3B-Instruct", config, _QWEN_SPECIALS, tokenizer, extra)


def _qwen3_next() -> FakeModel:
    config = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "decoder_sparse_step": 1,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "moe_intermediate_size": 512,
        "norm_topk_prob": True,
        "num_attention_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 48,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    }
    tokenizer = {
        "tokenizer_class": "Qwen2Tokenizer",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 1010000,
    }
    return FakeModel("Qwen/Qwen3-Next-80B-A3B-Instruct", config, _QWEN_SPECIALS, tokenizer)


def fake_models() -> list[FakeModel]:
    """Every hub model the upstream scheduler tests build a `ModelConfig` for (without weights)."""
    return [
        _opt("facebook/opt-125m", hidden=768, ffn=3072, heads=12, layers=12, proj=768, pre_ln=True),
        _opt("facebook/opt-350m", hidden=1024, ffn=4096, heads=16, layers=24, proj=512, pre_ln=False),
        _llava(),
        _qwen2_5_vl(),
        _qwen3_next(),
    ]


def tokenizer_json(specials: dict[str, int]) -> str:
    """A word-level tokenizer (split on whitespace) whose ids run contiguously up to the last special.

    Ordinary ids map to placeholder words `w<id>`, so any id a test feeds in decodes to something; the
    specials sit at the ids the real model uses, as vLLM reads eos/pad/image ids from the tokenizer."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    by_id = {token_id: token for token, token_id in specials.items()}
    size = max(256, max(specials.values()) + 1)
    vocab = {by_id.get(i, f"w{i}"): i for i in range(size)}
    unk = next((t for t in ("<unk>", "<|endoftext|>", "</s>") if t in specials), None)
    tokenizer = Tokenizer(WordLevel(vocab, unk_token=unk))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in specials])
    return tokenizer.to_str()


def _write_json(path: Path, content: dict[str, Any]) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n")


def write_model(hub_cache: Path, model: FakeModel) -> Path:
    """Write one repository into `hub_cache` (idempotent) and return its snapshot folder."""
    repo = hub_cache / ("models--" + model.repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / model.commit
    if (snapshot / "tokenizer.json").is_file():
        return snapshot
    snapshot.mkdir(parents=True, exist_ok=True)
    _write_json(snapshot / "config.json", model.config)
    _write_json(snapshot / "tokenizer_config.json", model.tokenizer_config)
    for name, content in model.extra_files.items():
        _write_json(snapshot / name, content)
    # Last, so that an interrupted write is redone at the next start (the check above).
    (snapshot / "tokenizer.json").write_text(tokenizer_json(model.specials))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(model.commit)
    return snapshot


def write_fake_hub(hub_cache: Path) -> list[Path]:
    """Write every fake model into `hub_cache` (the `HF_HUB_CACHE` folder); return their snapshots."""
    hub_cache.mkdir(parents=True, exist_ok=True)
    return [write_model(hub_cache, model) for model in fake_models()]
