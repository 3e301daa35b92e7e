"""Hypothesis settings and strategies for fuzzing the request path.

`RPS_FUZZ_EXAMPLES` scales every fuzz test's example count (default 1: the CI budget); for a longer
campaign run e.g. `RPS_FUZZ_EXAMPLES=50 pytest tests/triton -k fuzz`.
"""

from __future__ import annotations

import base64
import io
import json
import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rps_harness.client import encode_image, encode_video
from rps_harness.workload.media import random_image, random_video
from rps_serve.triton import protocol as p

# Every input a generate request may carry (rps_ensemble and vllm_model alike).
INPUT_NAMES = (
    p.TEXT_INPUT,
    p.IMAGE,
    p.VIDEO,
    p.STREAM,
    p.SAMPLING_PARAMETERS,
    p.EXCLUDE_INPUT_IN_OUTPUT,
    *map(p.return_flag, p.ADDITIONAL_OUTPUTS),
    p.EMBEDDING_REQUEST,
)
SCALE = max(1, int(os.environ.get("RPS_FUZZ_EXAMPLES", "1")))


def fuzz_settings(examples: int) -> Any:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=SCALE == 1,  # CI runs the same examples every time; campaigns explore
    )


_RNG = np.random.default_rng(7)
VALID_JPEG = encode_image(random_image(24, 32, _RNG))
VALID_VIDEO = encode_video(random_video(6, 16, 16, _RNG))


def png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A small PNG whose header claims `width` x `height`: a decompression bomb's header."""
    import struct
    import zlib

    data = png(np.zeros((1, 1), dtype=np.uint8))
    ihdr = data.index(b"IHDR")
    body = struct.pack(">II", width, height) + data[ihdr + 12 : ihdr + 17]
    chunk = b"IHDR" + body
    return (
        data[: ihdr - 4]
        + struct.pack(">I", 13)
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + data[ihdr + 21 :]
    )


def _mutated(seed: bytes) -> st.SearchStrategy[bytes]:
    """`seed` truncated, with bytes flipped, or with garbage spliced in."""
    positions = st.integers(0, len(seed))
    return st.one_of(
        positions.map(lambda n: seed[:n]),
        st.tuples(positions, st.binary(min_size=1, max_size=64)).map(
            lambda t: seed[: t[0]] + t[1] + seed[t[0] + len(t[1]) :]
        ),
        st.tuples(positions, st.binary(max_size=256)).map(lambda t: seed[: t[0]] + t[1] + seed[t[0] :]),
    )


image_bytes = st.one_of(
    st.binary(max_size=2048),
    _mutated(VALID_JPEG),
    _mutated(png(np.zeros((10, 20), dtype=np.uint8))),
    st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1)).map(lambda wh: bomb_png(*wh)),
    st.just(VALID_JPEG),
)
video_bytes = st.one_of(
    st.binary(max_size=4096),
    _mutated(VALID_VIDEO),
    st.binary(max_size=512).map(lambda b: b"\x00\x00\x00\x18ftypmp42" + b),
    st.just(VALID_VIDEO),
)
# base64 fields as sent on the wire: valid base64 of anything, or not base64 at all.
base64_field = st.one_of(
    image_bytes.map(base64.b64encode),
    st.binary(max_size=256),
    st.text(max_size=64).map(lambda t: t.encode("utf-8")),
)
IMAGE_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"
MARKERS = [
    IMAGE_MARKER,
    "<|vision_start|><|video_pad|><|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
]
prompt_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=20)), max_size=8).map("".join),
    st.text(alphabet=st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs"]), max_size=100),
    st.just(""),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=10)
)
SAMPLING_FIELDS = [
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "n",
    "seed",
    "stop",
    "min_tokens",
    "ignore_eos",
    "logprobs",
    "presence_penalty",
    "extra_args",
    "bogus_field",
    "logit_bias",
    "allowed_token_ids",
    "stop_token_ids",
    "bad_words",
]
sampling_json = st.one_of(
    st.dictionaries(
        st.sampled_from(SAMPLING_FIELDS),
        st.one_of(
            json_scalars,
            st.lists(json_scalars, max_size=3),
            st.dictionaries(st.text(max_size=5), json_scalars, max_size=2),
        ),
        max_size=4,
    ).map(lambda d: json.dumps(d).encode()),
    json_scalars.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
)


def _bytes_tensor(items: list[bytes]) -> np.ndarray:
    return np.array(items, dtype=np.object_)


# Any dtype and shape for any input: Triton checks them against config.pbtxt; the parser must not rely on it.
any_tensor = st.one_of(
    st.lists(
        st.one_of(st.binary(max_size=40), prompt_text.map(str.encode), base64_field, sampling_json),
        max_size=3,
    ).map(_bytes_tensor),
    arrays(
        st.sampled_from([np.bool_, np.int64, np.float32, np.uint8]),
        st.lists(st.integers(0, 3), max_size=3).map(tuple),
    ),
)
