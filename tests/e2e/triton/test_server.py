"""End to end: tritonserver -> rps_ensemble (preprocess, ONNX cost models, vllm_model) -> vLLM."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from rps_harness.client import Generation, StreamClient, encode_video, infer_inputs
from rps_harness.loadtest.server_stats import ServedFit, scrape
from rps_harness.workload.media import random_video
from rps_harness.workload.request_format import RequestFormat
from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestClass, RequestFeatures
from tests.e2e.triton.conftest import ENSEMBLE, PROBES, VLLM_MODEL, Requests, Server, run

LABELS = {c.label for c in RequestClass}


def preprocess_features(server: Server, generation: Generation) -> np.ndarray:
    """`preprocess`'s features for `generation`, sent its inputs: vllm_backend's less the return_*
    flags, which the ensemble hands `vllm_model` directly."""
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    tensors = replace(generation, additional_outputs=()).tensors()
    result = client.infer("preprocess", infer_inputs(grpcclient, tensors))
    features: np.ndarray = result.as_numpy("features")
    return features


def class_metrics(server: Server) -> dict[tuple[str, str], float]:
    """(metric, class) -> value for the rps_* series of vllm_model."""
    snapshot = scrape(server.endpoints.metrics_url)
    return {
        (name, dict(labels)["rps_class"]): value
        for (name, labels), value in snapshot.samples.items()
        if name.startswith("rps_") and ("model", "vllm_model") in labels and "rps_class" in dict(labels)
    }


@pytest.mark.parametrize("modality", list(Modality), ids=lambda m: m.value)
def test_ensemble_streams_and_classifies(server: Server, requests: Requests, modality: Modality) -> None:
    generation = requests.make(modality, max_tokens=8)
    placeholders = RequestFormat.of_model(server.model).placeholder_tokens(modality)
    features = preprocess_features(server, generation)
    assert features[0, cols.MODALITY] == modality.index
    assert features[0, cols.MODALITY_TOKENS] == placeholders

    result = run(server, ENSEMBLE, generation)

    assert result.error is None
    # One streamed response per engine output: a token each, unless vLLM merged the deltas of a slow
    # consumer (it does under load), so at most one per generated token.
    assert 1 <= len(result.chunks) <= 8
    verdict = server.cost_model().assess(
        [RequestFeatures(modality, int(features[0, cols.PROMPT_TOKENS]), placeholders)]
    )[0]
    expected = RequestClass.for_level(verdict.level, server.cost_model().num_classes).label
    assert result.outputs["rps_class"][0].decode() == expected
    assert result.outputs["est_prefill_s"][0] == pytest.approx(verdict.estimate.prefill_s, rel=1e-5)


def test_http_generate(server: Server, requests: Requests) -> None:
    generation = requests.make(Modality.TEXT, max_tokens=5, stream=False)
    body = {
        "text_input": generation.prompt,
        "stream": False,
        "exclude_input_in_output": True,
        "sampling_parameters": json.dumps(generation.sampling_parameters),
    }
    request = urllib.request.Request(
        f"http://{server.endpoints.http_url}/v2/models/{ENSEMBLE}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as reply:
        answer = json.loads(reply.read())
    assert answer["text_output"]
    assert answer["rps_class"] in LABELS


def test_vllm_model_directly_with_a_video(server: Server, requests: Requests) -> None:
    """Without the ensemble's class tensors the engine classifies; the model still reports the class."""
    generation = replace(
        requests.make(Modality.VIDEO, max_tokens=4),
        stream=False,
        exclude_input_in_output=False,
        additional_outputs=("num_output_tokens", "finish_reason", "num_input_tokens"),
    )

    features = preprocess_features(server, generation)

    result = run(server, "vllm_model", generation)

    assert result.error is None
    outputs = result.outputs
    assert result.text.startswith(generation.prompt)  # the prompt is kept unless excluded
    assert outputs["num_output_tokens"][0] == 4
    assert outputs["finish_reason"][0] == b"length"
    # vLLM's token count is the one preprocess computed with the model's processor.
    assert outputs["num_input_tokens"][0] == features[0, cols.PROMPT_TOKENS]
    assert outputs["rps_class"][0].decode() in LABELS


def bad_requests(requests: Requests) -> dict[str, tuple[Generation, str]]:
    """Each bad request and a fragment of the error it must get."""
    corrupt = replace(requests.make(Modality.IMAGE), images=(b"\xff\xd8\xff" + bytes(range(256)) * 8,))
    # More frames than model.json's media.max_video_frames allows (tiny frames keep it small).
    long_video = encode_video(random_video(1801, 16, 16, np.random.default_rng(1)), fps=30)
    oversized = replace(requests.make(Modality.VIDEO), video=long_video)
    bad_json = requests.make(Modality.TEXT)
    bad_value = replace(requests.make(Modality.TEXT), sampling_parameters={"max_tokens": -3})
    return {
        "corrupt image": (corrupt, "image 0 cannot be decoded"),
        "oversized video": (oversized, "frames; the limit is 1800"),
        "bad json": (bad_json, "is not valid JSON"),
        "bad sampling value": (bad_value, "invalid 'sampling_parameters'"),
    }


def test_bad_requests_get_errors_while_good_ones_complete(server: Server, requests: Requests) -> None:
    good = StreamClient(server.endpoints.grpc_url)
    for i, modality in enumerate([Modality.VIDEO, Modality.TEXT, Modality.IMAGE]):
        good.submit(ENSEMBLE, f"good{i}", requests.make(modality, max_tokens=16).tensors())
    bad: dict[str, tuple[StreamClient, str]] = {}
    for name, (generation, message) in bad_requests(requests).items():
        client = StreamClient(server.endpoints.grpc_url)
        tensors: dict[str, Any] = generation.tensors()
        if name == "bad json":
            tensors["sampling_parameters"] = np.array([b'{"max_tokens": 4,'], dtype=np.object_)
        client.submit(ENSEMBLE, name, tensors)
        bad[name] = (client, message)

    for name, (client, message) in bad.items():
        result = client.wait(name)
        client.close()
        assert result.error is not None, name
        assert message in result.error, (name, result.error)
    for i in range(3):
        result = good.wait(f"good{i}")
        assert result.error is None
        assert 1 <= len(result.chunks) <= 16  # deltas may be merged under load, see above
    good.close()


def test_per_class_metrics(server: Server, requests: Requests) -> None:
    assert run(server, ENSEMBLE, requests.make(Modality.TEXT, max_tokens=2)).error is None
    metrics = class_metrics(server)
    for name in ("rps_requests_total", "rps_queue_depth", "rps_wait_seconds_total", "rps_preemptions_total"):
        for cls in RequestClass:
            assert (name, cls.label) in metrics, (name, cls.label)
    assert sum(metrics[("rps_requests_total", c.label)] for c in RequestClass) >= 2
    assert all(metrics[("rps_queue_depth", c.label)] == 0 for c in RequestClass)
    assert metrics[("rps_wait_seconds_total", "sand")] > 0


def test_base64_is_checked(server: Server, requests: Requests) -> None:
    generation = requests.make(Modality.TEXT)
    tensors = generation.tensors()
    tensors["image"] = np.array([b"not base64!"], dtype=np.object_)
    client = StreamClient(server.endpoints.grpc_url)
    client.submit(ENSEMBLE, "b64", tensors)
    result = client.wait("b64")
    client.close()
    assert result.error is not None and "base64" in result.error


def test_a_running_server_says_how_it_would_class_a_request(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rps-serve classify --url` asks `vllm_model`, which classes with the repository's ONNX models
    when it does not refit them: it answers as those files do offline, for texts, images and videos
    of several sizes."""
    from rps_harness.cli import main
    from rps_harness.client import ServedClasses

    assert ServedFit.of(scrape(server.endpoints.metrics_url)) is None  # it does not refit online
    served = ServedClasses(server.endpoints.grpc_url)
    offline = server.cost_model()
    assert served.num_classes == offline.num_classes
    for asked, known in zip(served.assess(PROBES), offline.assess(PROBES), strict=True):
        assert asked.level == known.level
        assert asked.estimate.prefill_s == pytest.approx(known.estimate.prefill_s, rel=1e-5)
        assert asked.estimate.memory_tokens == known.estimate.memory_tokens
    assert main(["classify", "--url", server.endpoints.grpc_url, "video:6300:6272", "text:20"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    expected = offline.assess(
        [RequestFeatures(Modality.VIDEO, 6300, 6272), RequestFeatures(Modality.TEXT, 20, 0)]
    )
    assert [int(row.split()[3]) for row in rows] == [a.level for a in expected]


@pytest.mark.parametrize(
    "rows",
    [
        [[0, 20]],  # a column short
        [[3, 20, 0]],  # no such modality
        [[1, 20, 40]],  # more placeholder tokens than prompt tokens
        [[0, -5, 0]],
        [[0, 20.5, 0]],
        [[0, float("nan"), 0]],
    ],
)
def test_a_malformed_assessment_gets_a_clear_error(server: Server, rows: list[list[float]]) -> None:
    from rps_serve.triton import protocol as p

    client = StreamClient(server.endpoints.grpc_url)
    client.submit(VLLM_MODEL, "bad", {p.ASSESS: np.array(rows, dtype=np.float32)})
    result = client.wait("bad")
    client.close()
    assert result.error is not None and p.ASSESS in result.error
