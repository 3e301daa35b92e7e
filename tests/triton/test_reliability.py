"""Reliability and trust over a real server with lowered limits: every limit refused with INVALID_ARG,
media never fetched from what a request names, fuzzed requests all answered, a cancellation storm that
leaks nothing, and a short overload soak."""

from __future__ import annotations

import base64
import http.server
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rps_serve.bench.server_stats import MetricsSnapshot, scrape
from rps_serve.bench.soak import SoakConfig, run_soak
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.client import Generation, StreamClient, StreamResult, encode_image, encode_video
from rps_serve.workload.media import random_image, random_video
from rps_serve.workload.prompts import chat_prompt, filler_text
from tests.triton.conftest import SPEC, Requests, Server, start_server
from tests.triton.fuzzing import (
    INPUT_NAMES,
    any_tensor,
    base64_field,
    bomb_png,
    fuzz_settings,
    image_bytes,
    png,
    prompt_text,
    sampling_json,
    video_bytes,
)

ENSEMBLE, VLLM_MODEL = "rps_ensemble", "vllm_model"
MODELS = [ENSEMBLE, VLLM_MODEL]
BAD_REQUEST = 400  # what Triton's HTTP endpoint answers for INVALID_ARG (an internal error is 500)
# How the models and the server report an internal failure rather than a refusal.
INTERNAL = re.compile(r"preprocess failed|vllm_model failed|[Ss]tub|not healthy|INTERNAL")
# Lower than model.json's, so that requests over them stay small; test media (224x224 images, 16-frame
# 224x224 videos, ~2K-token long texts) fit.
LIMITS = {
    "max_text_bytes": 65536,
    "max_prompt_tokens": 4000,
    "max_output_tokens": 256,
    "max_images": 1,
    "max_image_bytes": 200_000,
    "max_image_pixels": 256 * 256,
    "max_video_bytes": 1_000_000,
    "max_video_pixels": 240 * 240,
    "max_video_frames": 32,
}
RNG = np.random.default_rng(5)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with start_server(tmp_path_factory, media=LIMITS) as running:
        yield running


def run(server: Server, model: str, tensors: dict[str, np.ndarray], timeout_s: float = 300) -> StreamResult:
    """One request on a stream of its own, so a stream error is its error."""
    client = StreamClient(server.endpoints.grpc_url)
    try:
        client.submit(model, "r", tensors)
        result = client.wait("r", timeout_s)
        if result.error is None and client.unattributed_errors:
            result.error = client.unattributed_errors[0]
        return result
    finally:
        client.close()


def generate(server: Server, model: str, generation: Generation) -> tuple[int, str]:
    """A non-streamed request over HTTP `generate`, whose status code says which kind of error it got."""
    body: dict[str, object] = {
        p.TEXT_INPUT: generation.prompt,
        p.STREAM: False,
        p.EXCLUDE_INPUT_IN_OUTPUT: True,
        p.SAMPLING_PARAMETERS: json.dumps(dict(generation.sampling_parameters)),
    }
    tensors = generation.tensors()
    if p.IMAGE in tensors:
        body[p.IMAGE] = [item.decode() for item in tensors[p.IMAGE]]
    if p.VIDEO in tensors:
        body[p.VIDEO] = tensors[p.VIDEO][0].decode()
    request = urllib.request.Request(
        f"http://{server.endpoints.http_url}/v2/models/{model}/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def metrics(server: Server) -> MetricsSnapshot:
    return scrape(server.endpoints.metrics_url)


def wait_drained(server: Server, timeout_s: float = 180) -> MetricsSnapshot:
    """Metrics once no request is left in the engine or in Triton; fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = metrics(server)
        left = {
            "queue": now.total("rps_queue_depth", model=VLLM_MODEL),
            "kv": now.total("rps_kv_cache_usage", model=VLLM_MODEL),
            "pending": now.total("nv_inference_pending_request_count"),
        }
        if not any(left.values()):
            return now
        assert time.monotonic() < deadline, f"not drained: {left}"
        time.sleep(0.5)


def serves(server: Server, requests: Requests) -> None:
    for model in MODELS:
        result = run(server, model, requests.make(Modality.IMAGE, max_tokens=4).tensors())
        assert result.error is None, (model, result.error)
        assert result.text


def _text(requests: Requests, words: int) -> Generation:
    return replace(
        requests.make(Modality.TEXT), prompt=chat_prompt(filler_text(words, requests.rng), Modality.TEXT)
    )


def over_the_limits(requests: Requests) -> dict[str, tuple[Generation, str]]:
    """One request over each limit, and a fragment of the error it must get."""
    image, video = requests.make(Modality.IMAGE), requests.make(Modality.VIDEO)
    return {
        "text bytes": (
            replace(requests.make(Modality.TEXT), prompt="a" * 70000),
            "bytes; the limit is 65536",
        ),
        "prompt tokens": (_text(requests, 5000), "the limit is 4000"),
        "output tokens": (
            replace(requests.make(Modality.TEXT), sampling_parameters={"max_tokens": 257}),
            "max_tokens is 257; the limit is 256",
        ),
        "images": (
            replace(
                image,
                prompt=chat_prompt("two", Modality.IMAGE).replace(
                    "user\n", "user\n" + image.prompt[:0] + "<|vision_start|><|image_pad|><|vision_end|>"
                ),
                images=image.images * 2,
            ),
            "2 images; the limit is 1",
        ),
        "image bytes": (
            replace(image, images=(png(random_image(300, 300, RNG)),)),
            "bytes; the limit is 200000",
        ),
        "image pixels": (
            replace(image, images=(bomb_png(1000, 1000),)),
            "1000x1000; the limit is 65536 pixels",
        ),
        "video bytes": (replace(video, video=bytes(1_000_001)), "1000001 bytes; the limit is 1000000"),
        "video frames": (
            replace(video, video=encode_video(random_video(33, 16, 16, RNG))),
            "33 frames; the limit is 32",
        ),
        "video pixels": (
            replace(video, video=encode_video(random_video(2, 256, 256, RNG))),
            "256x256; the limit is 57600 pixels",
        ),
    }


@pytest.mark.parametrize("model", MODELS)
def test_every_limit_is_refused_with_invalid_arg(server: Server, requests: Requests, model: str) -> None:
    assert (
        len(_text(requests, 5000).prompt.encode()) < LIMITS["max_text_bytes"]
    )  # tokens, not bytes, refuse it
    for name, (generation, message) in over_the_limits(requests).items():
        status, body = generate(server, model, generation)
        assert status == BAD_REQUEST, (name, status, body)
        assert message in body, (name, body)
    serves(server, requests)


def test_max_tokens_null_is_capped_at_the_output_limit(server: Server, requests: Requests) -> None:
    generation = replace(
        requests.make(Modality.TEXT),
        sampling_parameters={"max_tokens": None, "ignore_eos": True},
        stream=False,
    )
    result = run(server, VLLM_MODEL, generation.tensors())
    assert result.error is None
    assert result.outputs["num_output_tokens"][0] == LIMITS["max_output_tokens"]


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.server.payload)  # type: ignore[attr-defined]

    def log_message(self, *args: object) -> None:
        pass


def test_media_named_in_a_request_is_never_fetched(
    server: Server, requests: Requests, tmp_path: Path
) -> None:
    """A URL or a local path in the prompt or in place of media bytes is never opened: a local HTTP
    server that serves a valid image counts its hits, and a valid image file lies at the named path."""
    jpeg = encode_image(random_image(64, 64, RNG))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    httpd.payload = jpeg  # type: ignore[attr-defined]
    _CountingHandler.hits = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/cat.jpg"
    image_file, video_file = tmp_path / "cat.jpg", tmp_path / "clip.mp4"
    image_file.write_bytes(jpeg)
    video_file.write_bytes(encode_video(random_video(4, 16, 16, RNG)))
    image, video = requests.make(Modality.IMAGE), requests.make(Modality.VIDEO)
    try:
        for model in MODELS:
            for named in (url, f"file://{image_file}", str(image_file)):
                # Named in the text only: served as text, nothing fetched.
                prompt = chat_prompt(f"Describe {named}", Modality.TEXT)
                text = replace(requests.make(Modality.TEXT, max_tokens=2), prompt=prompt)
                assert generate(server, model, text)[0] == 200
                # In place of the image's bytes, base64 or not: refused, nothing fetched or opened.
                for field in (base64.b64encode(named.encode()), named.encode()):
                    tensors = image.tensors()
                    tensors[p.IMAGE] = np.array([field], dtype=np.object_)
                    result = run(server, model, tensors)
                    assert result.error is not None, named
                    assert "cannot be decoded" in result.error or "base64" in result.error, result.error
            tensors = video.tensors()
            tensors[p.VIDEO] = np.array([base64.b64encode(str(video_file).encode())], dtype=np.object_)
            result = run(server, model, tensors)
            assert result.error is not None and "video cannot be decoded" in result.error
    finally:
        httpd.shutdown()
    assert _CountingHandler.hits == []


def test_the_served_model_is_safetensors_and_json(server: Server) -> None:
    """vLLM and the processor load the weights from safetensors, nothing from a pickle-based format."""
    suffixes = {f.suffix for f in server.model.rglob("*") if f.is_file()}
    assert ".safetensors" in suffixes
    assert suffixes <= {".safetensors", ".json", ".txt", ".jinja"}, suffixes


# Fuzzing over the server: random and malformed requests, to both models. Each must end with a
# response or an error; afterwards the server still serves.
WELL_FORMED_SAMPLING = st.fixed_dictionaries(
    {"max_tokens": st.integers(1, 8)},
    optional={"temperature": st.floats(0, 2), "seed": st.integers(0, 2**32)},
)


@st.composite
def fuzzed_request(draw: st.DrawFn) -> dict[str, np.ndarray]:
    kind = draw(st.sampled_from(["consistent", "random", "raw"]))
    if kind == "raw":  # any dtype and shape per input, some missing: Triton or the parser refuses them
        return draw(
            st.dictionaries(
                st.sampled_from([*INPUT_NAMES, "unknown_input"]),
                any_tensor,
                max_size=6,
            )
        )
    tensors: dict[str, np.ndarray] = {}
    if kind == "consistent":  # markers matching the media, media maybe corrupt, sampling fuzzed
        modality = draw(st.sampled_from(list(Modality)))
        prompt = chat_prompt(draw(prompt_text), modality).encode()
        if modality is Modality.IMAGE:
            tensors[p.IMAGE] = np.array([base64.b64encode(draw(image_bytes))], dtype=np.object_)
        if modality is Modality.VIDEO:
            tensors[p.VIDEO] = np.array([base64.b64encode(draw(video_bytes))], dtype=np.object_)
    else:
        prompt = draw(st.one_of(prompt_text.map(str.encode), st.binary(max_size=100)))
        if draw(st.booleans()):
            tensors[p.IMAGE] = np.array(
                draw(st.lists(base64_field, min_size=1, max_size=3)), dtype=np.object_
            )
        if draw(st.booleans()):
            tensors[p.VIDEO] = np.array(
                [draw(st.one_of(base64_field, video_bytes.map(base64.b64encode)))], dtype=np.object_
            )
    tensors[p.TEXT_INPUT] = np.array([prompt], dtype=np.object_)
    sampling = draw(st.one_of(sampling_json, WELL_FORMED_SAMPLING.map(lambda d: json.dumps(d).encode())))
    tensors[p.SAMPLING_PARAMETERS] = np.array([sampling], dtype=np.object_)
    tensors[p.STREAM] = np.array([draw(st.booleans())])
    tensors[p.EXCLUDE_INPUT_IN_OUTPUT] = np.array([draw(st.booleans())])
    return tensors


@fuzz_settings(40)
@given(model=st.sampled_from(MODELS), tensors=fuzzed_request())
def test_fuzzed_requests_are_all_answered(server: Server, model: str, tensors: dict[str, np.ndarray]) -> None:
    result = run(server, model, tensors, timeout_s=120)  # raises TimeoutError if it never ends
    assert result.done_s is not None
    if result.error is not None:  # a refusal, not an internal error
        assert not INTERNAL.search(result.error), result.error


def test_server_serves_after_the_fuzzing(server: Server, requests: Requests) -> None:
    serves(server, requests)
    wait_drained(server)


# The cancellation storm.
@dataclass(frozen=True)
class Plan:
    cancel: str | None  # None, "at once", "after delay", "mid-stream"
    delay_s: float = 0.0
    chunks: int = 0


def _plans(n: int, rng: random.Random) -> list[Plan]:
    plans = []
    for _ in range(n):
        if rng.random() >= 0.3:
            plans.append(Plan(None))
        else:
            cancel = rng.choice(["at once", "after delay", "mid-stream", "mid-stream"])
            plans.append(Plan(cancel, delay_s=rng.uniform(0, 0.3), chunks=rng.randint(1, 8)))
    return plans


def _drive(server: Server, model: str, generation: Generation, plan: Plan) -> StreamResult | None:
    """Send one request on its own stream; cancel it as planned (None) or return its result."""
    client = StreamClient(server.endpoints.grpc_url)
    client.submit(model, "r", generation.tensors())
    if plan.cancel is None:
        try:
            return client.wait("r", 300)
        finally:
            client.close()
    if plan.cancel == "after delay":
        time.sleep(plan.delay_s)
    elif plan.cancel == "mid-stream":
        deadline = time.monotonic() + 300
        while len(client.results["r"].chunks) < plan.chunks:
            assert time.monotonic() < deadline and client.results["r"].done_s is None
            time.sleep(0.01)
    client.close(cancel_requests=True)
    return None


def _storm(
    server: Server, requests: Requests, model: str, plans: list[Plan], cancelled_tokens: int
) -> list[StreamResult | None]:
    modalities = [Modality.TEXT, Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    generations = [
        requests.make(modalities[i % 4], max_tokens=cancelled_tokens if plan.cancel else 16)
        for i, plan in enumerate(plans)
    ]
    with ThreadPoolExecutor(len(plans)) as pool:
        return list(pool.map(lambda gp: _drive(server, model, *gp), zip(generations, plans, strict=True)))


def _delta(after: MetricsSnapshot, before: MetricsSnapshot, name: str) -> float:
    return after.total(name, model=VLLM_MODEL) - before.total(name, model=VLLM_MODEL)


def test_streams_cancelled_mid_stream_are_aborted_in_the_engine(server: Server, requests: Requests) -> None:
    """Six streams cancelled one at a time after their first chunks (text, image, video, twice): each
    ends and nothing is left, and those Triton flags to the model are aborted in the engine (they ask for
    the output limit of 256 tokens, far more than they get before the cancellation lands). Triton 2.51
    does not flag every stream cancellation (see docs/limits-and-guarantees.md), so at least one of the
    six must be aborted."""
    before = wait_drained(server)
    for modality in (Modality.TEXT, Modality.IMAGE, Modality.VIDEO) * 2:
        generation = requests.make(modality, max_tokens=LIMITS["max_output_tokens"])
        _drive(server, VLLM_MODEL, generation, Plan("mid-stream", chunks=2))
        wait_drained(server)
    after = wait_drained(server)
    assert _delta(after, before, "rps_requests_total") == 6
    aborted = _delta(after, before, "rps_cancelled_total")
    print(f"6 streams cancelled mid-stream one at a time: {aborted:.0f} aborted in the engine")
    assert 1 <= aborted <= 6
    serves(server, requests)


def test_cancellation_storm_on_vllm_model(server: Server, requests: Requests) -> None:
    """30% of 30 concurrent streams cancelled at once, after a random delay or mid-stream: the others
    complete, every admitted request is completed or aborted, no more are aborted than were cancelled, and
    nothing is left."""
    before = wait_drained(server)
    plans = _plans(30, random.Random(11))
    results = _storm(server, requests, VLLM_MODEL, plans, cancelled_tokens=LIMITS["max_output_tokens"])
    after = wait_drained(server)

    completed = [r for r, plan in zip(results, plans, strict=True) if plan.cancel is None]
    assert all(r is not None and r.error is None and r.chunks for r in completed)
    cancelled = _delta(after, before, "rps_cancelled_total")
    admitted = _delta(after, before, "rps_requests_total")
    mid_stream = sum(plan.cancel == "mid-stream" for plan in plans)
    early = sum(plan.cancel in ("at once", "after delay") for plan in plans)
    assert mid_stream >= 3
    assert cancelled <= mid_stream + early
    assert len(completed) + cancelled <= admitted <= len(completed) + mid_stream + early
    print(
        f"storm: {mid_stream + early} cancelled by clients ({mid_stream} mid-stream), "
        f"{admitted - len(completed):.0f} of them reached the engine, {cancelled:.0f} aborted there"
    )
    serves(server, requests)


def test_cancellation_storm_through_the_ensemble(server: Server, requests: Requests) -> None:
    """Through rps_ensemble (Triton 2.51 rarely flags the cancellation to vllm_model, see
    docs/limits-and-guarantees.md): cancelled streams end for their clients, the engine finishes what it
    was not told to abort, the uncancelled complete, and once drained nothing is left in the engine or
    in Triton."""
    before = wait_drained(server)
    plans = _plans(12, random.Random(12))
    results = _storm(server, requests, ENSEMBLE, plans, cancelled_tokens=64)
    after = wait_drained(server)

    completed = [r for r, plan in zip(results, plans, strict=True) if plan.cancel is None]
    assert all(r is not None and r.error is None and r.chunks for r in completed)
    admitted = _delta(after, before, "rps_requests_total")
    cancelled = _delta(after, before, "rps_cancelled_total")
    assert len(completed) <= admitted <= len(plans)
    print(
        f"ensemble storm: {len(plans) - len(completed)} cancelled by clients, "
        f"{admitted:.0f} reached the engine, {cancelled:.0f} aborted there"
    )
    serves(server, requests)


def test_short_overload_soak(server: Server) -> None:
    """`rps-serve soak` in small: the rate measured closed-loop, then two cycles of 1.5x it for 22 s
    each, each followed by the drain; memory after the second drain against that after the first."""
    config = SoakConfig(duration_s=44, cycles=2, calibrate_s=15, calibrate_concurrency=8, sample_s=2, seed=3)
    report = run_soak(server.endpoints, SPEC, config)
    print(report.to_json())
    for cycle in report.cycles:
        assert cycle.sent >= 5
        assert cycle.completed + cycle.rejected + cycle.errors == cycle.sent
        assert cycle.errors == 0, cycle.error_examples
        assert set(cycle.rss_drained_by_process) >= {"tritonserver", "stub vllm_model"}
        assert set(cycle.shm_drained_by_stub) >= {"stub preprocess", "stub vllm_model"}
    assert report.failures() == []
