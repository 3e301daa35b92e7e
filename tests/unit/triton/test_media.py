"""Decoding and validating request media."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.client import encode_image, encode_video
from rps_harness.workload.media import random_image, random_video
from rps_serve.triton.media import (
    MediaLimits,
    decode_image,
    decode_images,
    decode_video,
    image_size,
    sample_indices,
    video_shape,
)
from rps_serve.triton.protocol import BadRequest

RNG = np.random.default_rng(0)


def test_an_image_decodes_to_its_size() -> None:
    image = decode_image(encode_image(random_image(30, 40, RNG)), MediaLimits())
    assert (image.height, image.width, image.mode) == (30, 40, "RGB")


@pytest.mark.parametrize(
    ("data", "limits", "message"),
    [
        (b"\xff\xd8\xff not really a jpeg", MediaLimits(), "cannot be decoded"),
        (
            encode_image(random_image(30, 40, RNG)),
            MediaLimits(max_image_pixels=1000),
            "30 is 40x30; the limit",
        ),
        (encode_image(random_image(30, 40, RNG)), MediaLimits(max_image_bytes=10), "bytes; the limit is 10"),
    ],
)
def test_bad_images_are_refused(data: bytes, limits: MediaLimits, message: str) -> None:
    with pytest.raises(BadRequest, match=message.replace("30 is", "0 is")):
        decode_image(data, limits)


def test_too_many_images() -> None:
    image = encode_image(random_image(8, 8, RNG))
    with pytest.raises(BadRequest, match="2 images; the limit is 1"):
        decode_images((image, image), MediaLimits(max_images=1))


def test_a_video_is_sampled_to_the_frames_the_model_takes() -> None:
    frames = decode_video(encode_video(random_video(20, 32, 48, RNG)), MediaLimits(video_frames=8))
    assert frames.shape == (8, 32, 48, 3)
    assert frames.dtype == np.uint8


def test_a_short_video_keeps_all_its_frames() -> None:
    frames = decode_video(encode_video(random_video(4, 16, 16, RNG)), MediaLimits(video_frames=8))
    assert frames.shape[0] == 4


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (MediaLimits(max_video_frames=10), "12 frames; the limit is 10"),
        (MediaLimits(max_video_pixels=100), "16x16; the limit is 100 pixels"),
        (MediaLimits(max_video_bytes=100), "bytes; the limit is 100"),
    ],
)
def test_videos_over_the_limits_are_refused(limits: MediaLimits, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        decode_video(encode_video(random_video(12, 16, 16, RNG)), limits)


def test_a_corrupt_video_is_refused() -> None:
    with pytest.raises(BadRequest, match="video"):
        decode_video(b"\x00\x00\x00\x18ftypmp42" + bytes(500), MediaLimits())


def test_sampled_frames_spread_over_the_video() -> None:
    assert sample_indices(24, 4).tolist() == [0, 8, 15, 23]
    assert sample_indices(3, 8).tolist() == [0, 1, 2]


def test_unknown_limits_are_named() -> None:
    with pytest.raises(ValueError, match="max_frames"):
        MediaLimits.from_mapping({"max_frames": 3})


def test_metadata_gives_the_sizes_decoding_would() -> None:
    data = encode_image(random_image(30, 40, RNG))
    assert image_size(data, MediaLimits()) == (30, 40)
    video = encode_video(random_video(20, 32, 48, RNG))
    limits = MediaLimits(video_frames=8)
    assert video_shape(video, limits) == decode_video(video, limits).shape[:3]
    short = encode_video(random_video(4, 16, 16, RNG))
    assert video_shape(short, limits) == decode_video(short, limits).shape[:3]


def test_metadata_applies_the_limits() -> None:
    with pytest.raises(BadRequest, match="0 is 40x30; the limit"):
        image_size(encode_image(random_image(30, 40, RNG)), MediaLimits(max_image_pixels=1000))
    with pytest.raises(BadRequest, match="cannot be decoded"):
        image_size(b"\xff\xd8\xff not really a jpeg", MediaLimits())
    with pytest.raises(BadRequest, match="12 frames; the limit is 10"):
        video_shape(encode_video(random_video(12, 16, 16, RNG)), MediaLimits(max_video_frames=10))
    with pytest.raises(BadRequest, match="video"):
        video_shape(b"\x00\x00\x00\x18ftypmp42" + bytes(500), MediaLimits())
