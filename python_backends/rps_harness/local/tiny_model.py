"""Builds tiny random multimodal models (weights, tokenizer, processor) offline, for tests and CPU demos.

Two families, each as vLLM and Hugging Face load it:
- Qwen2-VL (`rps-serve make-tiny-model`'s default, what the CPU stack serves): an image keeps its size,
  in 28-pixel units, up to `image_size` squared (larger ones are scaled down to it), (H/14 * W/14) / 4
  placeholder tokens (672x672 -> 576); every video frame is resized to `video_size` squared, a video
  is frames/2 * (S/14)^2 / 4 (24 frames of 448x448 -> 3,072);
- LLaVA-OneVision (the GPU image's family): a SigLIP tower on 384x384 crops, 729 tokens each; an image
  is a 384x384 base view plus its anyres grid of crops, newline tokens included (384x384 -> 1,485,
  672x672 -> 3,699); a video is 196 tokens per frame (27x27 patches pooled to 14x14) plus one.
Weights are random: outputs are gibberish, costs are real. Beside the model, `MEDIA_FILE` records the
media the load tools send it.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rps_harness.workload.request_format import MediaShape

logger = logging.getLogger(__name__)


class Family(enum.Enum):
    QWEN2_VL = "qwen2-vl"
    LLAVA_ONEVISION = "llava-onevision"


QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
LLAVA_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
PATCH, MERGE, TEMPORAL = 14, 2, 2
QWEN_MIN_PIXELS = 56 * 56  # Qwen2-VL's own lower bound: 4 placeholder tokens
SIGLIP_SIZE = 384  # LLaVA-OneVision's crop: 27x27 patches of 14 pixels
LLAVA_GRID = 3  # anyres crops up to 3x3 of SIGLIP_SIZE (the published model goes to 6x6; 9 crops at most)

QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# As the published LLaVA-OneVision template: media first, each on a line of its own, then the text.
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>\n{% elif part['type'] == 'video' %}<video>\n{% endif %}"
    "{% endfor %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """A tiny model's family and sizes; `image_size`, `video_size` and `video_frames` are the media it
    is built for (a Qwen2-VL resizes every image and frame to them; a LLaVA-OneVision tiles whatever it
    gets, and these are what the load tools send)."""

    family: Family = Family.QWEN2_VL
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    vision_depth: int = 2
    vision_dim: int = 64
    vocab: int = 4096
    image_size: int = 672
    video_size: int = 448
    video_frames: int = 24
    seed: int = 0

    def __post_init__(self) -> None:
        unit = PATCH * MERGE
        if self.family is Family.QWEN2_VL and (self.image_size % unit or self.video_size % unit):
            raise ValueError(f"a Qwen2-VL's image and video sizes must be multiples of {unit}")
        if self.family is Family.QWEN2_VL and self.video_frames % TEMPORAL:
            raise ValueError(f"a Qwen2-VL's video frames must be a multiple of {TEMPORAL}")

    @property
    def media(self) -> MediaShape:
        return MediaShape(self.image_size, self.video_size, self.video_frames)


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "is", "um", "pe", "da"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)]
    return [" ".join(rng.choices(words, k=rng.randint(5, 30))) + "." for _ in range(lines)]


def _tokenizer(spec: TinyModelSpec, special_tokens: list[str], chat_template: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template,
        model_max_length=32768,
    )


def build_tiny_model(out: Path, spec: TinyModelSpec) -> None:
    """Write a loadable checkpoint of `spec`'s family into `out`, and the media it is built for."""
    out.mkdir(parents=True, exist_ok=True)
    if spec.family is Family.QWEN2_VL:
        _build_qwen2_vl(out, spec)
    else:
        _build_llava_onevision(out, spec)
    spec.media.save(out)
    logger.info("wrote a tiny %s to %s", spec.family.value, out)


def _text_config(spec: TinyModelSpec, tokenizer: Any) -> dict[str, Any]:
    token = tokenizer.convert_tokens_to_ids
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": spec.hidden,
        "intermediate_size": spec.hidden * 2,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "max_position_embeddings": 32768,
        "bos_token_id": token("<|endoftext|>"),
        "eos_token_id": token("<|im_end|>"),
        "pad_token_id": token("<|endoftext|>"),
    }


def _build_qwen2_vl(out: Path, spec: TinyModelSpec) -> None:
    import torch
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = _tokenizer(spec, QWEN_SPECIAL_TOKENS, QWEN_CHAT_TEMPLATE)
    token = tokenizer.convert_tokens_to_ids
    head_dim = spec.hidden // spec.heads
    unit = head_dim // 16  # mrope sections split head_dim / 2 as 2:3:3, like Qwen2-VL
    config = Qwen2VLConfig(
        text_config={
            **_text_config(spec, tokenizer),
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [unit * 2, unit * 3, unit * 3],
            },
        },
        vision_config={
            "depth": spec.vision_depth,
            "embed_dim": spec.vision_dim,
            "hidden_size": spec.hidden,
            "num_heads": 4,
            "mlp_ratio": 2,
            "patch_size": PATCH,
            "spatial_merge_size": MERGE,
            "temporal_patch_size": TEMPORAL,
        },
        image_token_id=token("<|image_pad|>"),
        video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"),
        vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=False,
    )
    config.dtype = "float32"  # bf16 on this class of CPU needs AMX permissions; f32 needs none
    torch.manual_seed(spec.seed)
    model = Qwen2VLForConditionalGeneration(config).to(torch.float32)
    model.save_pretrained(out)
    # Pixel bounds: an image keeps its size up to image_size^2 (so that costs grow with it, as on the
    # real model, whose cap is higher); every video frame becomes video_size^2.
    image_pixels = spec.image_size**2
    video_pixels = spec.video_size**2
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            min_pixels=QWEN_MIN_PIXELS, max_pixels=image_pixels, patch_size=PATCH, merge_size=MERGE
        ),
        video_processor=Qwen2VLVideoProcessor(
            min_pixels=video_pixels,
            max_pixels=video_pixels,
            patch_size=PATCH,
            merge_size=MERGE,
            temporal_patch_size=TEMPORAL,
            do_sample_frames=False,
            num_frames=spec.video_frames,  # read by the Triton preprocess step to sample videos
        ),
        tokenizer=tokenizer,
        chat_template=QWEN_CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)


def _build_llava_onevision(out: Path, spec: TinyModelSpec) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    tokenizer = _tokenizer(spec, LLAVA_SPECIAL_TOKENS, LLAVA_CHAT_TEMPLATE)
    token = tokenizer.convert_tokens_to_ids
    pinpoints = [
        [SIGLIP_SIZE * rows, SIGLIP_SIZE * cols]
        for rows in range(1, LLAVA_GRID + 1)
        for cols in range(1, LLAVA_GRID + 1)
    ]
    config = LlavaOnevisionConfig(
        text_config={"model_type": "qwen2", **_text_config(spec, tokenizer)},
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": spec.vision_dim,
            "intermediate_size": spec.vision_dim * 2,
            "num_hidden_layers": spec.vision_depth,
            "num_attention_heads": 4,
            "image_size": SIGLIP_SIZE,
            "patch_size": PATCH,
            "vision_use_head": False,
        },
        image_token_index=token("<image>"),
        video_token_index=token("<video>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints,
        vision_aspect_ratio="anyres_max_9",
        tie_word_embeddings=False,
    )
    config.dtype = "float32"
    config.architectures = ["LlavaOnevisionForConditionalGeneration"]
    torch.manual_seed(spec.seed)
    model = LlavaOnevisionForConditionalGeneration(config).to(torch.float32)
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    # Published checkpoints nest the SigLIP tower under `vision_model`, which vLLM's loader expects;
    # transformers 5 saves it flat.
    state = {
        name.replace("model.vision_tower.", "model.vision_tower.vision_model."): tensor.contiguous()
        for name, tensor in model.state_dict().items()
    }
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    crop = {"height": SIGLIP_SIZE, "width": SIGLIP_SIZE}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=crop, image_grid_pinpoints=pinpoints),
        video_processor=LlavaOnevisionVideoProcessor(
            size=crop,
            do_sample_frames=False,
            num_frames=spec.video_frames,  # read by the Triton preprocess step to sample videos
        ),
        tokenizer=tokenizer,
        num_image_tokens=(SIGLIP_SIZE // PATCH) ** 2,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        chat_template=LLAVA_CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
