"""NVIDIA vllm_backend's conventions a client or a dashboard relies on, on the session's real server:
sampling parameters sent as the request's own Triton parameters (its README's first `curl`), and
vLLM's `vllm:*` metrics on the metrics endpoint beside the per-class `rps_*` series."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from rps_harness.client import StreamClient
from rps_harness.loadtest.server_stats import MetricsSnapshot
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from tests.e2e.triton.conftest import (
    ENSEMBLE,
    VLLM_MODEL,
    Requests,
    Server,
    post_generate,
    run,
    wait_drained,
)

MAX_TOKENS = 5
# Greedy, with the log-probabilities that show it: under temperature 0 every token is the top-ranked one.
GREEDY = {"temperature": 0, "max_tokens": MAX_TOKENS, "ignore_eos": True, "logprobs": 1}


def _post(server: Server, model: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    status, reply = post_generate(server, model, body)
    return status, json.loads(reply)


def _greedy(logprobs: str) -> bool:
    """Whether every generated token was the engine's top-ranked one (vllm_backend's `logprobs`: per
    position, the sampled token and the top one, one entry where they are the same)."""
    positions = json.loads(logprobs)
    return len(positions) == MAX_TOKENS and all(
        len(position) == 1 and next(iter(position.values()))["rank"] == 1 for position in positions
    )


def _whole(requests: Requests) -> dict[str, Any]:
    """A text request answered whole, asking for vllm_backend's logprobs and token counts, without a
    `sampling_parameters` tensor."""
    generation = replace(
        requests.make(Modality.TEXT, stream=False),
        additional_outputs=(p.LOGPROBS, p.NUM_OUTPUT_TOKENS, p.NUM_INPUT_TOKENS),
    )
    tensors: dict[str, Any] = generation.tensors()
    del tensors[p.SAMPLING_PARAMETERS]
    return tensors


def test_request_parameters_are_the_sampling_parameters_where_the_tensor_is_absent(
    server: Server, requests: Requests
) -> None:
    """Over HTTP `generate` as vllm_backend's README sends them (`stream` and the `return_*` flags
    among the parameters become input tensors there), and over gRPC, into either model: served, at
    the temperature and length they ask."""
    for model in (VLLM_MODEL, ENSEMBLE):
        prompt = requests.make(Modality.TEXT).prompt
        parameters = {"stream": False, **GREEDY, "return_logprobs": True, "return_num_output_tokens": True}
        status, reply = _post(server, model, {"text_input": prompt, "parameters": parameters})
        assert status == 200, (model, reply)
        assert reply[p.NUM_OUTPUT_TOKENS] == MAX_TOKENS and _greedy(reply[p.LOGPROBS]), (model, reply)
        assert reply[p.TEXT_OUTPUT].startswith(prompt)  # unset `exclude_input_in_output`, as there

    client = StreamClient(server.endpoints.grpc_url)
    try:
        for model in (VLLM_MODEL, ENSEMBLE):
            client.submit(model, f"{model} greedy", _whole(requests), parameters=GREEDY)
            # The same request at temperature 1, where the top-ranked token is seldom drawn five times
            # in a row: shows the check above tells the temperature asked from the default.
            client.submit(
                model, f"{model} sampled", _whole(requests), parameters={**GREEDY, "temperature": 1}
            )
        for request_id in list(client.results):
            result = client.wait(request_id)
            assert result.error is None, (request_id, result.error)
            assert result.outputs[p.NUM_OUTPUT_TOKENS][0] == MAX_TOKENS, request_id
            greedy = _greedy(result.outputs[p.LOGPROBS][0].decode())
            assert greedy == request_id.endswith("greedy"), request_id
    finally:
        client.close()


def test_request_parameters_vllm_would_not_take_are_refused_by_name(
    server: Server, requests: Requests
) -> None:
    """A key that is no vLLM sampling parameter, and parameters sent beside a `sampling_parameters`
    tensor (which vllm_backend would ignore), get errors naming them, through either model."""
    client = StreamClient(server.endpoints.grpc_url)
    with_tensor = requests.make(Modality.TEXT, stream=False).tensors()
    cases: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {}
    for model in (VLLM_MODEL, ENSEMBLE):
        cases[f"{model} unknown"] = (model, _whole(requests), {**GREEDY, "colour": "red"}, "'colour'")
        cases[f"{model} beside"] = (model, with_tensor, {"temperature": 0}, "'temperature' sent beside")
    try:
        for request_id, (model, tensors, parameters, _) in cases.items():
            client.submit(model, request_id, tensors, parameters=parameters)
        for request_id, (_, _, _, named) in cases.items():
            error = client.wait(request_id).error
            assert error is not None and named in error, (request_id, error)
    finally:
        client.close()
    status, reply = _post(
        server, VLLM_MODEL, {"text_input": "hello", "parameters": {"stream": False, "colour": "red"}}
    )
    assert status == 400 and "'colour'" in reply["error"], reply


def test_the_rest_of_the_compatibility_table(server: Server, requests: Requests) -> None:
    """The rows of docs/triton.md's table no other module checks: what vllm_backend takes and this
    server refuses, and a key that is no sampling parameter, are refused by name; without `logprobs`
    among the sampling parameters `cumulative_logprob` is NaN and `logprobs` is null, as there."""
    text, image = requests.make(Modality.TEXT, stream=False), requests.make(Modality.IMAGE)
    two_prompts = {**text.tensors(), p.TEXT_INPUT: np.array([b"one", b"two"], dtype=np.object_)}
    refused = {
        "two prompts": (two_prompts, "'text_input'"),
        "markers without media": (replace(image, images=()).tensors(), "placeholders"),
        "n": (replace(text, sampling_parameters={"n": 2}).tensors(), "n must be 1"),
        "unknown": (replace(text, sampling_parameters={"colour": "red"}).tensors(), "'colour' is no field"),
        **{
            key: (replace(text, sampling_parameters={key: {"json": {}}}).tensors(), key)
            for key in ("structured_outputs", "guided_decoding")
        },
    }
    # Each on a stream of its own: Triton's own error (the shape of `text_input`) names no request.
    for request_id, (tensors, named) in refused.items():
        error = run(server, ENSEMBLE, tensors).error
        assert error is not None and named in error, (request_id, error)
    answer = run(server, ENSEMBLE, replace(text, additional_outputs=(p.CUMULATIVE_LOGPROB, p.LOGPROBS)))
    assert answer.error is None, answer.error
    assert math.isnan(answer.outputs[p.CUMULATIVE_LOGPROB][0])
    assert answer.outputs[p.LOGPROBS].tolist() == [b"null"]


LABELS = {"model": VLLM_MODEL, "version": "1"}
VLLM_BACKEND_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
VLLM_BACKEND_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_params_n",
)
PHASES = tuple(f"vllm:request_{phase}_time_seconds" for phase in ("queue", "prefill", "decode", "inference"))
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


def _moved(before: MetricsSnapshot, after: MetricsSnapshot, sample: str) -> float:
    now = after.value(sample, **LABELS)
    assert now is not None, f"{sample} with labels {LABELS} is not on the metrics endpoint"
    return now - (before.value(sample, **LABELS) or 0.0)


def test_vllm_metrics_as_vllm_backend_exports_them(server: Server, requests: Requests) -> None:
    """Every `vllm:*` family vllm_backend exports, with its labels, moved by what was served: the
    token counts the responses report, a first token, an end and `n` per request, an inter-token time
    per later token; vLLM's phase times per request, and its load gauges back to 0 once drained."""
    before = wait_drained(server)
    sent = 4
    client = StreamClient(server.endpoints.grpc_url)
    try:
        for i in range(sent):
            tensors = replace(
                requests.make(Modality.TEXT, max_tokens=MAX_TOKENS, stream=i % 2 == 0),
                additional_outputs=(p.NUM_INPUT_TOKENS,),
            ).tensors()
            client.submit(ENSEMBLE if i < sent - 1 else VLLM_MODEL, str(i), tensors)
        prompt_tokens = 0
        for i in range(sent):
            result = client.wait(str(i))
            assert result.error is None, result.error
            prompt_tokens += int(result.outputs[p.NUM_INPUT_TOKENS][0])
    finally:
        client.close()
    deadline = time.monotonic() + 60
    while (after := wait_drained(server)).value("vllm:num_requests_running", **LABELS) != 0:
        assert time.monotonic() < deadline, "vllm:num_requests_running never read 0"
        time.sleep(0.5)

    assert _moved(before, after, "vllm:prompt_tokens_total") >= prompt_tokens
    assert _moved(before, after, "vllm:generation_tokens_total") == sent * MAX_TOKENS
    counts = {name: _moved(before, after, f"{name}_count") for name in VLLM_BACKEND_HISTOGRAMS + PHASES}
    assert counts == {
        **{name: sent for name in VLLM_BACKEND_HISTOGRAMS + PHASES},
        "vllm:time_per_output_token_seconds": sent * (MAX_TOKENS - 1),
    }
    assert _moved(before, after, "vllm:request_prompt_tokens_sum") == prompt_tokens
    assert _moved(before, after, "vllm:request_generation_tokens_sum") == sent * MAX_TOKENS
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert _moved(before, after, f"{name}_sum") > 0, name
        infinite = {**LABELS, "le": "+Inf"}
        last_bucket = (after.value(f"{name}_bucket", **infinite) or 0) - (
            before.value(f"{name}_bucket", **infinite) or 0
        )
        assert last_bucket == sent, name
    assert [after.value(name, **LABELS) for name in GAUGES] == [0, 0, 0]
    # The per-class series stay beside them.
    assert (
        after.total("rps_requests_total", model=VLLM_MODEL)
        - before.total("rps_requests_total", model=VLLM_MODEL)
        == sent
    )
