"""Parsing the vLLM-backend-compatible request tensors."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from rps_serve.triton.client import Generation
from rps_serve.triton.protocol import BadRequest, parse_request


def getter(tensors: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    return tensors.get


def test_round_trip_of_what_the_client_sends() -> None:
    generation = Generation("hello", images=(b"img",), video=b"vid", sampling_parameters={"max_tokens": 3})
    parsed = parse_request(getter(generation.tensors()))
    assert parsed.prompt == "hello"
    assert parsed.images == (b"img",)
    assert parsed.video == b"vid"
    assert parsed.sampling_parameters == {"max_tokens": 3}
    assert parsed.stream and parsed.exclude_input_in_output


def test_defaults_follow_the_vllm_backend() -> None:
    parsed = parse_request(getter({"text_input": np.array([b"hi"], dtype=np.object_)}))
    assert parsed.images == () and parsed.video is None
    assert not parsed.stream and not parsed.exclude_input_in_output
    assert parsed.sampling_parameters == {}


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({}, "'text_input' is required"),
        ({"sampling_parameters": np.array([b"{oops"], dtype=np.object_)}, "not valid JSON"),
        ({"sampling_parameters": np.array([json.dumps([1]).encode()], dtype=np.object_)}, "JSON object"),
        ({"image": np.array([b"%%%"], dtype=np.object_)}, "image 0 is not valid base64"),
        ({"video": np.array([b"a", b"b"], dtype=np.object_)}, "'video' must hold one element"),
        ({"stream": np.array([True, False])}, "'stream' must hold one boolean"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(tensors: dict[str, np.ndarray], message: str) -> None:
    if tensors:
        tensors = {"text_input": np.array([b"hi"], dtype=np.object_), **tensors}
    with pytest.raises(BadRequest, match=message):
        parse_request(getter(tensors))


def test_base64_of_media_is_decoded() -> None:
    image = base64.b64encode(b"\x89PNG...")
    parsed = parse_request(
        getter(
            {"text_input": np.array([b"x"], dtype=np.object_), "image": np.array([image], dtype=np.object_)}
        )
    )
    assert parsed.images == (b"\x89PNG...",)
