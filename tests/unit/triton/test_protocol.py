"""Parsing the vLLM-backend-compatible request tensors."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from rps_harness.client import Generation
from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.triton import protocol as p
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


def _hi(**tensors: np.ndarray) -> dict[str, np.ndarray]:
    return {"text_input": np.array([b"hi"], dtype=np.object_), **tensors}


def _sampling_tensor(parameters: dict[str, object]) -> np.ndarray:
    return np.array([json.dumps(parameters).encode()], dtype=np.object_)


def test_without_the_tensor_the_requests_own_parameters_are_its_sampling_parameters() -> None:
    """As vllm_backend reads them (`request.parameters()` is JSON), and errors name where they came."""
    parsed = parse_request(getter(_hi()), json.dumps({"temperature": 0, "max_tokens": "4"}))
    assert parsed.sampling_parameters == {"temperature": 0, "max_tokens": "4"}
    assert parsed.sampling_source == p.REQUEST_PARAMETERS
    assert parse_request(getter(_hi()), "{}").sampling_parameters == {}
    tensor = parse_request(getter(_hi(sampling_parameters=_sampling_tensor({"top_k": 2}))), "{}")
    assert tensor.sampling_parameters == {"top_k": 2}
    assert tensor.sampling_source == "'sampling_parameters'"


def test_parameters_beside_the_tensor_are_refused_unless_the_tensor_holds_them() -> None:
    """In a step of the ensemble Triton hands the client's parameters on beside the tensor `preprocess`
    made of them: served, named as the client sent them. Anything else beside the tensor is refused."""
    given = {"temperature": 0, "max_tokens": "4"}
    step = parse_request(getter(_hi(sampling_parameters=_sampling_tensor(given))), json.dumps(given))
    assert step.sampling_parameters == given and step.sampling_source == p.REQUEST_PARAMETERS
    tensor = _sampling_tensor({"temperature": 1.0, "max_tokens": 4})
    with pytest.raises(BadRequest, match="'max_tokens', 'temperature' sent beside 'sampling_parameters'"):
        parse_request(getter(_hi(sampling_parameters=tensor)), json.dumps(given))


@pytest.mark.parametrize(("raw", "message"), [("{oops", "not valid JSON"), ("[1]", "must be an object")])
def test_unreadable_request_parameters_are_refused(raw: str, message: str) -> None:
    with pytest.raises(BadRequest, match=f"request parameters .*{message}"):
        parse_request(getter(_hi()), raw)


def test_base64_of_media_is_decoded() -> None:
    image = base64.b64encode(b"\x89PNG...")
    parsed = parse_request(
        getter(
            {"text_input": np.array([b"x"], dtype=np.object_), "image": np.array([image], dtype=np.object_)}
        )
    )
    assert parsed.images == (b"\x89PNG...",)


def test_an_assessment_reads_back_the_rows_the_client_wrote() -> None:
    requests = [RequestFeatures(Modality.TEXT, 20), RequestFeatures(Modality.VIDEO, 6300, 6272)]
    assert p.parse_assessment(cols.feature_matrix(requests)) == requests


@pytest.mark.parametrize(
    "rows",
    [[[0, 20]], [[-1, 20, 0]], [[3, 20, 0]], [[1, 20, 40]], [[0, -5, 0]], [[0, 20.5, 0]], [[0, np.inf, 0]]],
)
def test_a_malformed_assessment_is_refused(rows: list[list[float]]) -> None:
    with pytest.raises(p.BadRequest, match=p.ASSESS):
        p.parse_assessment(np.array(rows, dtype=np.float32))


def test_an_empty_assessment_is_refused() -> None:
    with pytest.raises(p.BadRequest, match=p.ASSESS):
        p.parse_assessment(np.zeros((0, cols.NUM_FEATURES), dtype=np.float32))


def test_the_ensembles_features_are_read_back_and_a_request_without_them_has_none() -> None:
    video = RequestFeatures(Modality.VIDEO, 6300, 6272)
    assert p.claimed_features(getter({p.CLAIMED_FEATURES: cols.feature_matrix([video])})) == video
    assert p.claimed_features(getter({})) is None


@pytest.mark.parametrize("rows", [[[0, 20, 0], [0, 20, 0]], [[1, 20, 40]], [[0, 20.5, 0]]])
def test_malformed_or_several_claimed_features_are_refused(rows: list[list[float]]) -> None:
    with pytest.raises(p.BadRequest, match=p.CLAIMED_FEATURES):
        p.claimed_features(getter({p.CLAIMED_FEATURES: np.array(rows, dtype=np.float32)}))


def _text(**tensors: np.ndarray) -> dict[str, np.ndarray]:
    return {p.TEXT_INPUT: np.array([b"hi"], dtype=np.object_), **tensors}


def test_the_return_flags_ask_for_vllm_backends_additional_outputs() -> None:
    asked = (p.FINISH_REASON, p.NUM_OUTPUT_TOKENS)
    generation = Generation("hi", additional_outputs=asked)
    assert parse_request(getter(generation.tensors())).additional_outputs == set(asked)
    tensors = _text(return_logprobs=np.array([False]), return_num_input_tokens=np.array([True]))
    assert parse_request(getter(tensors)).additional_outputs == {p.NUM_INPUT_TOKENS}
    assert parse_request(getter(_text())).additional_outputs == frozenset()
    with pytest.raises(ValueError, match="text_output"):
        Generation("hi", additional_outputs=(p.TEXT_OUTPUT,)).tensors()


@pytest.mark.parametrize("output", p.ADDITIONAL_OUTPUTS)
def test_a_malformed_return_flag_is_refused_by_name(output: str) -> None:
    with pytest.raises(BadRequest, match=f"'return_{output}' must hold one boolean"):
        parse_request(getter(_text(**{p.return_flag(output): np.array([True, True])})))


def test_only_asked_additional_outputs_are_sent_and_only_if_requested() -> None:
    everything = [p.TEXT_OUTPUT, *p.ADDITIONAL_OUTPUTS, p.RPS_CLASS]
    assert p.outputs_to_send(everything, set()) == {p.TEXT_OUTPUT, p.RPS_CLASS}
    assert p.outputs_to_send(everything, {p.LOGPROBS}) == {p.TEXT_OUTPUT, p.LOGPROBS, p.RPS_CLASS}
    assert p.outputs_to_send([p.TEXT_OUTPUT], {p.LOGPROBS}) == {p.TEXT_OUTPUT}


@pytest.mark.parametrize(
    ("stream", "exclude", "expected"),
    [
        (False, None, False),
        (True, None, True),
        (False, False, False),
        (False, True, True),
        (True, True, True),
    ],
)
def test_exclude_input_in_output_as_vllm_backend_reads_it(
    stream: bool, exclude: bool | None, expected: bool
) -> None:
    """Unset, a whole answer repeats the prompt and a streamed one does not."""
    tensors = _text(stream=np.array([stream]))
    if exclude is not None:
        tensors[p.EXCLUDE_INPUT_IN_OUTPUT] = np.array([exclude])
    assert parse_request(getter(tensors)).exclude_input_in_output is expected


def test_a_streamed_request_that_wants_its_prompt_repeated_is_refused() -> None:
    tensors = _text(stream=np.array([True]), exclude_input_in_output=np.array([False]))
    with pytest.raises(BadRequest, match="'exclude_input_in_output' false is not allowed when streaming"):
        parse_request(getter(tensors))


def test_an_embedding_request_is_refused_by_name() -> None:
    embedding = np.array([json.dumps({"input": "hi"}).encode()], dtype=np.object_)
    with pytest.raises(BadRequest, match="'embedding_request' is not served"):
        parse_request(getter(_text(embedding_request=embedding)))
