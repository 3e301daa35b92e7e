"""Builds a tiny random Qwen2-VL (weights, tokenizer, processor) offline, for tests and CPU demos.

Image placeholder tokens = (H/14 * W/14) / 4 after the processor resizes to `image_size`, e.g.
672x672 -> 576; video placeholder tokens = frames/2 * (S/14)^2 / 4, e.g. 24 frames of 448x448 -> 3,072.
Weights are random: outputs are gibberish, costs are real.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from rps_serve.requests import Modality

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
PATCH, MERGE, TEMPORAL = 14, 2, 2
SPEC_FILE = "rps_tiny_model.json"

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
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
        if self.image_size % unit or self.video_size % unit:
            raise ValueError(f"image and video sizes must be multiples of {unit}")
        if self.video_frames % TEMPORAL:
            raise ValueError(f"video frames must be a multiple of {TEMPORAL}")

    @classmethod
    def load(cls, model: Path) -> TinyModelSpec:
        """The spec a model directory was built with (`SPEC_FILE`, written by `build_tiny_model`)."""
        spec_file = model / SPEC_FILE
        if not spec_file.is_file():
            raise FileNotFoundError(
                f"{spec_file} not found: build the model with `rps-serve make-tiny-model`"
            )
        raw = json.loads(spec_file.read_text())
        return cls(**{name: raw[name] for name in cls.__dataclass_fields__})

    def placeholder_tokens(self, modality: Modality) -> int:
        """Placeholder tokens the model's processor makes of one item of `modality`."""
        return {Modality.TEXT: 0, Modality.IMAGE: self.image_tokens, Modality.VIDEO: self.video_tokens}[
            modality
        ]

    @property
    def image_tokens(self) -> int:
        return (self.image_size // PATCH) ** 2 // MERGE**2

    @property
    def video_tokens(self) -> int:
        return self.video_frames // TEMPORAL * (self.video_size // PATCH) ** 2 // MERGE**2


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "is", "um", "pe", "da"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)]
    return [" ".join(rng.choices(words, k=rng.randint(5, 30))) + "." for _ in range(lines)]


def _tokenizer(spec: TinyModelSpec):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def build_tiny_model(out: Path, spec: TinyModelSpec) -> None:
    """Write a loadable Qwen2-VL checkpoint for `spec` into `out`."""
    import torch
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(spec)
    token = tokenizer.convert_tokens_to_ids
    head_dim = spec.hidden // spec.heads
    unit = head_dim // 16  # mrope sections split head_dim / 2 as 2:3:3, like Qwen2-VL
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": spec.hidden,
            "intermediate_size": spec.hidden * 2,
            "num_hidden_layers": spec.layers,
            "num_attention_heads": spec.heads,
            "num_key_value_heads": spec.kv_heads,
            "max_position_embeddings": 32768,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1000000.0,
                "mrope_section": [unit * 2, unit * 3, unit * 3],
            },
            "bos_token_id": token("<|endoftext|>"),
            "eos_token_id": token("<|im_end|>"),
            "pad_token_id": token("<|endoftext|>"),
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
    # Pixel bounds pin the resize: every image becomes image_size^2, every video frame video_size^2.
    image_pixels = spec.image_size**2
    video_pixels = spec.video_size**2
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            min_pixels=image_pixels, max_pixels=image_pixels, patch_size=PATCH, merge_size=MERGE
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
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    (out / SPEC_FILE).write_text(
        json.dumps(
            {**asdict(spec), "image_tokens": spec.image_tokens, "video_tokens": spec.video_tokens}, indent=2
        )
    )
    logger.info("wrote tiny Qwen2-VL to %s", out)
