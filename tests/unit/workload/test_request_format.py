"""The served model's request format, read from its directory: turns by its chat template, placeholder
tokens by its processor's sizing rule, which must be what the processor itself expands a medium to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.request_format import MEDIA_FILE, MediaShape, RequestFormat
from rps_harness.workload.shapes import RequestKind
from rps_serve.model_processor import load_processor, placeholder_tokens
from rps_serve.requests import Modality
from tests.prompts import chat_prompt


def expanded_tokens(model: Path, modality: Modality, shape: tuple[int, ...]) -> int:
    """Placeholder tokens in the processor's own output for one medium of `shape`."""
    processor = load_processor(model)
    served = RequestFormat.of_model(model)
    pixels = np.random.default_rng(0)
    prompt = served.prompt("lo ka mi", modality)
    if modality is Modality.IMAGE:
        inputs = processor(text=[prompt], images=[random_image(shape[0], shape[1], pixels)])
        token = processor.image_token
    else:
        inputs = processor(text=[prompt], videos=[random_video(shape[0], shape[1], shape[2], pixels)])
        token = processor.video_token
    marker = processor.tokenizer.convert_tokens_to_ids(token)
    return int((np.asarray(inputs["input_ids"]) == marker).sum())


@pytest.mark.parametrize("family", ["tiny_qwen", "tiny_llava"])
@pytest.mark.parametrize(
    ("modality", "shape"),
    [
        (Modality.IMAGE, (384, 384)),
        (Modality.IMAGE, (480, 640)),
        (Modality.IMAGE, (900, 300)),
        (Modality.VIDEO, (4, 224, 224)),
    ],
)
def test_placeholder_counts_are_what_the_processor_expands(
    family: str, modality: Modality, shape: tuple[int, ...], request: pytest.FixtureRequest
) -> None:
    model: Path = request.getfixturevalue(family)
    processor = load_processor(model)
    images, videos = placeholder_tokens(
        processor,
        [shape] if modality is Modality.IMAGE else [],  # type: ignore[list-item]
        [shape] if modality is Modality.VIDEO else [],  # type: ignore[list-item]
    )
    assert (images + videos)[0] == expanded_tokens(model, modality, shape)


def test_llava_images_count_their_anyres_tiles(tiny_llava: Path) -> None:
    """A base view of 27x27 patches, then the crops of the best-fitting grid with a newline per row:
    a larger or wider image costs more tokens than one 384x384 crop (729 + 729 + 27)."""
    (square, wide, large), _ = placeholder_tokens(
        load_processor(tiny_llava), [(384, 384), (384, 768), (768, 768)], []
    )
    assert square == 729 + 27 * 27 + 27
    assert square < wide < large


def test_turns_come_from_the_models_template(tiny_qwen: Path, tiny_llava: Path) -> None:
    qwen = RequestFormat.of_model(tiny_qwen)
    llava = RequestFormat.of_model(tiny_llava)
    for modality in Modality:
        assert qwen.prompt("hello there", modality) == chat_prompt("hello there", modality)
    assert "<image>" in llava.prompt("x", Modality.IMAGE) and "<video>" in llava.prompt("x", Modality.VIDEO)
    assert "<image>" not in llava.prompt("x", Modality.TEXT)
    assert llava.placeholder_tokens(Modality.TEXT) == 0


def test_each_kind_counts_its_own_medium(tiny_qwen: Path) -> None:
    """Thumbnails and clips are smaller media than images and videos, counted as the processor
    expands them."""
    served = RequestFormat.of_model(tiny_qwen)
    media = served.media
    assert served.placeholder_tokens(RequestKind.THUMBNAIL) == expanded_tokens(
        tiny_qwen, Modality.IMAGE, (media.thumbnail_size, media.thumbnail_size)
    )
    assert served.placeholder_tokens(RequestKind.CLIP) == expanded_tokens(
        tiny_qwen, Modality.VIDEO, (media.clip_frames, media.video_size, media.video_size)
    )
    assert served.placeholder_tokens(RequestKind.THUMBNAIL) < served.placeholder_tokens(Modality.IMAGE)
    assert served.placeholder_tokens(RequestKind.CLIP) < served.placeholder_tokens(Modality.VIDEO)
    assert served.placeholder_tokens(RequestKind.DOCUMENT) == 0


def test_the_media_shape_is_read_from_beside_the_model(tmp_path: Path, tiny_llava: Path) -> None:
    assert MediaShape.of_model(tmp_path) == MediaShape()
    shape = MediaShape(image_size=300, video_size=200, video_frames=6)
    shape.save(tmp_path)
    assert MediaShape.of_model(tmp_path) == shape
    assert (shape.thumbnail_size, shape.clip_frames) == (100, 2)
    assert (tiny_llava / MEDIA_FILE).is_file()
    assert RequestFormat.of_model(tiny_llava, shape).media == shape
