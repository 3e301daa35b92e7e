"""What every response of the repository's models carries, on a real server: only the outputs the
request asked for, errors that name the request they answer (so that a client with many requests on
one stream can tell whose error it is), and a class no direct caller can make lighter.

The package's server turns a response carrying an unrequested output into an error (its
`conftest.py` says why), so these tests fail at once on a model that builds one.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from rps_harness.client import Generation, StreamClient, infer_inputs
from rps_harness.workload.prompts import filler_text
from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestClass, RequestFeatures
from rps_serve.triton import protocol as p
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Requests, Server
from tests.e2e.triton.instrumented.conftest import PREPROCESS
from tests.prompts import chat_prompt


def _finish(client: StreamClient, timeout_s: float = 300) -> None:
    tally = client.wait_all(time.monotonic() + timeout_s)
    assert tally.lost == 0, tally


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_ensemble_responses_carry_only_its_outputs(server: Server, requests: Requests, stream: bool) -> None:
    client = StreamClient(server.endpoints.grpc_url)
    try:
        for modality in Modality:
            client.submit(
                ENSEMBLE, modality.value, requests.make(modality, max_tokens=4, stream=stream).tensors()
            )
        _finish(client)
    finally:
        client.close()
    for modality in Modality:
        result = client.results[modality.value]
        assert result.error is None, result.error
        assert result.text
        assert set(result.outputs) == {p.TEXT_OUTPUT, p.RPS_CLASS, p.EST_PREFILL_S}


def test_direct_callers_get_the_outputs_they_name(server: Server, requests: Requests) -> None:
    """Named outputs only, and vllm_backend's additional outputs only where a `return_*` flag asks."""
    asking = replace(requests.make(Modality.IMAGE), additional_outputs=p.ADDITIONAL_OUTPUTS)
    client = StreamClient(server.endpoints.grpc_url)
    try:
        client.submit(VLLM_MODEL, "some", asking.tensors(), outputs=[p.TEXT_OUTPUT])
        client.submit(VLLM_MODEL, "all", requests.make(Modality.TEXT).tensors())
        _finish(client)
    finally:
        client.close()
    assert client.results["some"].error is None, client.results["some"].error
    assert set(client.results["some"].outputs) == {p.TEXT_OUTPUT}
    assert client.results["all"].error is None, client.results["all"].error
    assert set(client.results["all"].outputs) == {p.TEXT_OUTPUT, p.RPS_CLASS, p.EST_PREFILL_S}

    grpc = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    outputs = [grpcclient.InferRequestedOutput(p.FEATURES)]
    tensors = requests.make(Modality.VIDEO).tensors()
    result = grpc.infer(PREPROCESS, infer_inputs(grpcclient, tensors), outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == [p.FEATURES]
    assert result.as_numpy(p.FEATURES).shape == (1, 3)


def _responses(server: Server, model: str, tensors: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """The outputs of every response to one streamed request (StreamResult keeps the first's only)."""
    responses: list[dict[str, np.ndarray]] = []
    errors: list[str] = []
    done = threading.Event()

    def collect(result: grpcclient.InferResult | None, error: Exception | None) -> None:
        if error is not None:
            errors.append(str(error))
            done.set()
            return
        assert result is not None
        response = result.get_response()
        if response.outputs:
            responses.append({o.name: result.as_numpy(o.name) for o in response.outputs})
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            done.set()

    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    client.start_stream(callback=collect)
    try:
        client.async_stream_infer(
            model, infer_inputs(grpcclient, tensors), request_id="r", enable_empty_final_response=True
        )
        assert done.wait(300), "no final response"
    finally:
        client.stop_stream()
        client.close()
    assert not errors, errors
    return responses


def test_additional_outputs_through_the_ensemble_as_vllm_backend_sends_them(
    server: Server, requests: Requests
) -> None:
    """A whole answer carries the totals; streamed responses carry what is new since the previous one,
    and `finish_reason` reads "None" until the last; an output no flag asks for is not sent."""
    sampling = {"max_tokens": 4, "ignore_eos": True, "logprobs": 1}
    whole = replace(
        requests.make(Modality.IMAGE, stream=False),
        sampling_parameters=sampling,
        additional_outputs=p.ADDITIONAL_OUTPUTS,
    )
    (answer,) = _responses(server, ENSEMBLE, whole.tensors())
    assert set(answer) == {p.TEXT_OUTPUT, *p.ADDITIONAL_OUTPUTS, p.RPS_CLASS, p.EST_PREFILL_S}
    assert answer[p.FINISH_REASON].tolist() == [b"length"]
    assert answer[p.NUM_OUTPUT_TOKENS].tolist() == [4]
    assert answer[p.NUM_INPUT_TOKENS][0] > 64  # the image's placeholders and the text
    assert -math.inf < answer[p.CUMULATIVE_LOGPROB][0] <= 0
    assert len(json.loads(answer[p.LOGPROBS][0])) == 4

    streamed = replace(
        requests.make(Modality.TEXT, max_tokens=6),
        additional_outputs=(p.FINISH_REASON, p.NUM_OUTPUT_TOKENS),
    )
    responses = _responses(server, ENSEMBLE, streamed.tensors())
    assert all(
        set(r) == {p.TEXT_OUTPUT, p.FINISH_REASON, p.NUM_OUTPUT_TOKENS, p.RPS_CLASS, p.EST_PREFILL_S}
        for r in responses
    )
    assert sum(int(r[p.NUM_OUTPUT_TOKENS][0]) for r in responses) == 6
    assert [r[p.FINISH_REASON][0] for r in responses] == [b"None"] * (len(responses) - 1) + [b"length"]


def test_vllm_backend_inputs_it_does_not_serve_are_refused_by_name(
    server: Server, requests: Requests
) -> None:
    embedding = np.array([json.dumps({"input": "hello"}).encode()], dtype=np.object_)
    repeating = {
        **requests.make(Modality.TEXT, stream=True).tensors(),
        p.EXCLUDE_INPUT_IN_OUTPUT: np.array([False]),
    }
    bad = {
        "ensemble embedding": (
            ENSEMBLE,
            {**requests.make(Modality.TEXT).tensors(), p.EMBEDDING_REQUEST: embedding},
        ),
        "direct embedding": (
            VLLM_MODEL,
            {**requests.make(Modality.TEXT).tensors(), p.EMBEDDING_REQUEST: embedding},
        ),
        "ensemble repeating": (ENSEMBLE, repeating),
    }
    client = StreamClient(server.endpoints.grpc_url)
    try:
        for request_id, (model, tensors) in bad.items():
            client.submit(model, request_id, tensors)
        _finish(client)
    finally:
        client.close()
    for request_id, named in (
        ("ensemble embedding", p.EMBEDDING_REQUEST),
        ("direct embedding", p.EMBEDDING_REQUEST),
        ("ensemble repeating", p.EXCLUDE_INPUT_IN_OUTPUT),
    ):
        error = client.results[request_id].error
        assert error is not None and f"'{named}'" in error, (request_id, error)


def test_errors_on_a_shared_stream_reach_their_requests(server: Server, requests: Requests) -> None:
    """Good and bad requests interleaved on one stream: each error reaches the request that caused it,
    through the ensemble (preprocess's errors) and directly (vllm_model's), and the others complete."""
    good = requests.make(Modality.TEXT).tensors()
    bad_json = {**good, p.SAMPLING_PARAMETERS: np.array([b"{not json"], dtype=np.object_)}
    corrupt = {
        **requests.make(Modality.IMAGE).tensors(),
        p.IMAGE: np.array([b"bm90IGFuIGltYWdl"], dtype=np.object_),
    }
    bad = {
        "ensemble bad json": (ENSEMBLE, bad_json, "not valid JSON"),
        "ensemble corrupt image": (ENSEMBLE, corrupt, "image 0 cannot be decoded"),
        'direct "quoted" id': (VLLM_MODEL, bad_json, "not valid JSON"),
        "direct corrupt image": (VLLM_MODEL, corrupt, "image 0 cannot be decoded"),
    }
    client = StreamClient(server.endpoints.grpc_url)
    try:
        for n, (request_id, (model, tensors, _)) in enumerate(bad.items()):
            client.submit(model, request_id, tensors)
            client.submit(ENSEMBLE, f"good {n}", requests.make(Modality.TEXT).tensors())
        _finish(client)
    finally:
        client.close()
    assert client.unattributed_errors == []
    for request_id, (_, _, reason) in bad.items():
        error = client.results[request_id].error
        assert error is not None and reason in error, (request_id, error)
        assert p.attributed_request(error) == request_id
        assert " at 0x" not in error  # no object reprs
    for n in range(len(bad)):
        assert client.results[f"good {n}"].error is None
    assert client.tally().failed == len(bad) and client.tally().completed == len(bad)


def _claiming(tensors: dict[str, np.ndarray], level: int) -> dict[str, np.ndarray]:
    """`tensors` with the class tensors the ensemble would add, claiming `level`."""
    return {
        **tensors,
        p.CLASS_LEVEL: np.array([level], dtype=np.int64),
        p.CLASS_DISTANCES: np.zeros((1, 3), dtype=np.float32),
        p.COST: np.zeros((1, cols.NUM_COST_COLUMNS), dtype=np.float32),
    }


def test_a_direct_caller_cannot_claim_a_lighter_class(server: Server) -> None:
    """model.json's default `class_source: verify`: a long text claiming sand is served as its own
    class; a heavier claim stands; the engine's extra_args entry is not the caller's to set."""
    prompt = chat_prompt(filler_text(2500, random.Random(3)), Modality.TEXT)
    generation = Generation(prompt, sampling_parameters={"max_tokens": 2}, stream=False)
    grpc = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    features = grpc.infer(PREPROCESS, infer_inputs(grpcclient, generation.tensors())).as_numpy(p.FEATURES)
    cost_model = server.cost_model()
    own = cost_model.assess([RequestFeatures(Modality.TEXT, int(features[0, cols.PROMPT_TOKENS]), 0)])[0]
    assert own.level > 0, "the premise: a long text is not the lightest class"
    sneaky = replace(
        generation, sampling_parameters={"max_tokens": 2, "extra_args": {"rps": {"class_level": 0}}}
    )
    client = StreamClient(server.endpoints.grpc_url)
    try:
        client.submit(VLLM_MODEL, "sand", _claiming(generation.tensors(), 0))
        client.submit(VLLM_MODEL, "rocks", _claiming(generation.tensors(), 2))
        client.submit(VLLM_MODEL, "extra_args", sneaky.tensors())
        _finish(client)
    finally:
        client.close()
    label = RequestClass.for_level(own.level, cost_model.num_classes).label
    assert client.results["sand"].outputs[p.RPS_CLASS][0].decode() == label
    assert client.results["rocks"].outputs[p.RPS_CLASS][0].decode() == RequestClass.ROCKS.label
    error = client.results["extra_args"].error
    assert error is not None and "extra_args.rps" in error, error


def test_sampling_parameters_as_vllm_backend_takes_them(server: Server, requests: Requests) -> None:
    """Numbers and booleans as strings, as GenAI-Perf sends them to vllm_backend, are served; a string
    that is not of the declared type, and a key this deployment does not serve, get errors naming them."""
    text = requests.make(Modality.TEXT, stream=True)
    as_strings = {"max_tokens": "3", "ignore_eos": "true", "temperature": "0"}
    cases = {
        "strings": as_strings,
        "not a number": {**as_strings, "max_tokens": "three"},
        "lora": {**as_strings, "lora_name": "adapter"},
    }
    client = StreamClient(server.endpoints.grpc_url)
    try:
        for name, sampling in cases.items():
            client.submit(ENSEMBLE, name, replace(text, sampling_parameters=sampling).tensors())
        _finish(client)
    finally:
        client.close()
    served = client.results["strings"]
    assert served.error is None and served.text, served.error
    for name, named in (("not a number", "max_tokens"), ("lora", "lora_name")):
        error = client.results[name].error
        assert error is not None and named in error, error
