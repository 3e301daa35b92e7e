"""Decoding and validating request media: images (any format Pillow reads) and videos (any container
OpenCV's FFmpeg reads), within configurable limits, and sampling a video's frames.

Media only ever comes from the request's bytes: nothing here opens a URL or a path a client names.
"""

from __future__ import annotations

import io
import logging
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from rps_serve.triton.protocol import BadRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MediaLimits:
    """What a request may carry. Bytes are of the decoded (not base64) file; pixels are per image/frame.

    The prompt's limits live here too, so model.json's `media` section bounds everything a request brings.
    """

    max_text_bytes: int = 1024 * 1024  # checked before tokenizing, so a huge prompt costs nothing
    max_prompt_tokens: int = 32768  # media placeholders included: what the KV cache must hold
    max_output_tokens: int = 4096  # sampling_parameters' max_tokens
    max_images: int = 1
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096
    max_video_bytes: int = 64 * 1024 * 1024
    max_video_pixels: int = 1920 * 1080
    max_video_frames: int = 1800  # one minute at 30 frames per second
    video_frames: int = 24  # frames sampled from every video for the model

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> MediaLimits:
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown media limits {sorted(unknown)}; expected some of {sorted(known)}")
        return cls(**{name: int(value) for name, value in raw.items()})


def image_size(data: bytes, limits: MediaLimits, index: int = 0) -> tuple[int, int]:
    """(height, width) from the image's header, without decoding its pixels; `BadRequest` if the file
    is too large or its header is not an image's. A file with a valid header may still fail to decode
    later (`decode_image`)."""
    from PIL import Image

    if len(data) > limits.max_image_bytes:
        raise BadRequest(f"image {index} is {len(data)} bytes; the limit is {limits.max_image_bytes}")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Image.UnidentifiedImageError:
        raise BadRequest(f"image {index} cannot be decoded: not an image format Pillow reads") from None
    except Exception as error:  # as in decode_image: whatever the header parser raises
        raise BadRequest(f"image {index} cannot be decoded: {type(error).__name__}: {error}") from None
    if width * height > limits.max_image_pixels:
        raise BadRequest(f"image {index} is {width}x{height}; the limit is {limits.max_image_pixels} pixels")
    return height, width


def decode_image(data: bytes, limits: MediaLimits, index: int = 0) -> Any:
    """A PIL RGB image; `BadRequest` if it is too large or not an image (the limits are checked on the
    header, before any pixel is decoded: decompression bombs stop there)."""
    from PIL import Image

    image_size(data, limits, index)
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    # Pillow reports a malformed file as OSError, ValueError, SyntaxError, EOFError or struct.error
    # (fuzzing found several): whatever the decoder raises on the client's bytes is a bad image.
    except Exception as error:
        raise BadRequest(f"image {index} cannot be decoded: {type(error).__name__}: {error}") from None


def check_prompt_bytes(prompt: str, limits: MediaLimits) -> None:
    size = len(prompt.encode("utf-8"))
    if size > limits.max_text_bytes:
        raise BadRequest(f"the prompt is {size} bytes; the limit is {limits.max_text_bytes}")


def check_prompt_tokens(tokens: int, limits: MediaLimits) -> None:
    if tokens > limits.max_prompt_tokens:
        raise BadRequest(
            f"the prompt is {tokens} tokens (media placeholders included); "
            f"the limit is {limits.max_prompt_tokens}"
        )


def check_image_count(images: tuple[bytes, ...], limits: MediaLimits) -> None:
    if len(images) > limits.max_images:
        raise BadRequest(f"{len(images)} images; the limit is {limits.max_images} per request")


def decode_images(images: tuple[bytes, ...], limits: MediaLimits) -> list[Any]:
    check_image_count(images, limits)
    return [decode_image(data, limits, i) for i, data in enumerate(images)]


def sample_indices(total: int, wanted: int) -> np.ndarray:
    """`wanted` frame indices spread evenly over `total` frames (all of them if there are fewer)."""
    if total <= wanted:
        return np.arange(total)
    return np.unique(np.linspace(0, total - 1, wanted).round().astype(np.int64))


@contextmanager
def _opened_video(data: bytes, limits: MediaLimits) -> Iterator[Any]:
    """An OpenCV capture of the video whose size is within the limits; `BadRequest` otherwise."""
    import cv2

    if len(data) > limits.max_video_bytes:
        raise BadRequest(f"video is {len(data)} bytes; the limit is {limits.max_video_bytes}")
    # OpenCV reads containers from files only; the file lives in a private temporary directory.
    with tempfile.NamedTemporaryFile(suffix=".video") as file:
        file.write(data)
        file.flush()
        capture = cv2.VideoCapture(file.name, cv2.CAP_FFMPEG)
        try:
            if not capture.isOpened():
                raise BadRequest("video cannot be decoded: unknown or corrupt container")
            width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
            height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
            if width * height > limits.max_video_pixels:
                raise BadRequest(
                    f"video is {width}x{height}; the limit is {limits.max_video_pixels} pixels per frame"
                )
            yield capture
        finally:
            capture.release()


def video_shape(data: bytes, limits: MediaLimits) -> tuple[int, int, int]:
    """(frames sampled, height, width) from what the container says, without decoding a frame.

    A container that does not give its frame count is taken to have at least `limits.video_frames`:
    the most a video can cost at its frame size, so its class is never lighter than it turns out.
    """
    import cv2

    with _opened_video(data, limits) as capture:
        total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
    if total > limits.max_video_frames:
        raise BadRequest(f"video has {total} frames; the limit is {limits.max_video_frames}")
    if height <= 0 or width <= 0:
        raise BadRequest("video cannot be decoded: the container gives no frame size")
    sampled = limits.video_frames if total <= 0 else len(sample_indices(total, limits.video_frames))
    return sampled, height, width


def decode_video(data: bytes, limits: MediaLimits) -> np.ndarray:
    """`limits.video_frames` RGB frames [F, H, W, 3] uint8 sampled evenly over the video."""
    import cv2

    with _opened_video(data, limits) as capture:
        frames = _read_frames(capture, limits)
    if not frames:
        raise BadRequest("video has no decodable frames")
    return np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2RGB) for frame in frames])


def _read_frames(capture: Any, limits: MediaLimits) -> list[np.ndarray]:
    import cv2

    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    if total > limits.max_video_frames:
        raise BadRequest(f"video has {total} frames; the limit is {limits.max_video_frames}")
    if total <= 0:  # the container does not say: decode everything, within the limit
        frames: list[np.ndarray] = []
        while (ok := capture.grab()) and len(frames) <= limits.max_video_frames:
            frames.append(capture.retrieve()[1])
        if ok:
            raise BadRequest(f"video has more than {limits.max_video_frames} frames")
        return [frames[i] for i in sample_indices(len(frames), limits.video_frames)]
    wanted = set(sample_indices(total, limits.video_frames).tolist())
    frames = []
    for index in range(total):
        if not capture.grab():
            break
        if index in wanted:
            ok, frame = capture.retrieve()
            if ok:
                frames.append(frame)
    return frames
