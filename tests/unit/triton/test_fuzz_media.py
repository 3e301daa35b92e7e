"""Fuzzing the decoders and the request parser in-process: any bytes give a value within the limits
or a `BadRequest`, never another exception (which the models would report as an internal error)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rps_serve.triton.media import MediaLimits, decode_image, decode_images, decode_video
from rps_serve.triton.protocol import BadRequest, parse_request
from tests.fuzzing import INPUT_NAMES, any_tensor, fuzz_settings, image_bytes, video_bytes

# Hundreds of generated inputs: seconds a test (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow

LIMITS = MediaLimits(
    max_images=2, max_image_pixels=64 * 64, max_video_pixels=32 * 32, max_video_frames=40, video_frames=4
)


@fuzz_settings(300)
@given(data=image_bytes)
# A truncated PNG on which Pillow raised SyntaxError, found by this test.
@example(
    data=bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000140000000a0800000000913e213a0000000049444154" + "00" * 8
    )
)
def test_fuzz_image_decoder(data: bytes) -> None:
    try:
        image = decode_image(data, LIMITS)
    except BadRequest:
        return
    assert image.mode == "RGB"
    assert image.width * image.height <= LIMITS.max_image_pixels


@fuzz_settings(100)
@given(data=st.lists(image_bytes, max_size=3))
def test_fuzz_images_per_request(data: list[bytes]) -> None:
    try:
        images = decode_images(tuple(data), LIMITS)
    except BadRequest:
        return
    assert len(images) <= LIMITS.max_images


@fuzz_settings(100)
@given(data=video_bytes)
def test_fuzz_video_decoder(data: bytes) -> None:
    try:
        frames = decode_video(data, LIMITS)
    except BadRequest:
        return
    assert frames.dtype == np.uint8 and frames.ndim == 4 and frames.shape[3] == 3
    assert 1 <= frames.shape[0] <= LIMITS.video_frames
    assert frames.shape[1] * frames.shape[2] <= LIMITS.max_video_pixels


inputs = st.fixed_dictionaries(
    {},
    optional={name: any_tensor for name in INPUT_NAMES},
)


@fuzz_settings(300)
@given(tensors=inputs)
def test_fuzz_request_parser(tensors: dict[str, np.ndarray]) -> None:
    try:
        request = parse_request(tensors.get)
    except BadRequest:
        return
    assert isinstance(request.prompt, str)
    assert isinstance(request.sampling_parameters, dict)
    json.dumps(request.sampling_parameters)  # preprocess forwards it as JSON
