"""A real tritonserver (nvidia-pytriton's binary) serving a copy of `model_repository/` with a real
vLLM engine on a tiny random Qwen2-VL (a LLaVA-OneVision where a module asks): one server per
configuration, the repository's as it ships shared by every module that needs nothing else
(`server`), a module's own where it changes the configuration or harms the server."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rps_harness.cli.classify import repository_classes
from rps_harness.client import Generation, StreamClient, StreamResult, encode_image, encode_video
from rps_harness.loadtest.server_stats import MetricsSnapshot, scrape
from rps_harness.local.repository import policy_models, policy_repository
from rps_harness.local.server import Endpoints, local_server
from rps_harness.local.tiny_model import TinyModelSpec
from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_serve.cost.model import CostModel
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.triton import protocol as p
from rps_serve.triton.settings import MODEL_ENV, SETTINGS_FILE
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from tests.e2e.builds import tiny_model, trained_repository
from tests.prompts import chat_prompt

# 224x224 image -> 64 placeholder tokens; videos are sampled to 8 frames of 224x224 -> 256.
SPEC = TinyModelSpec(layers=2, hidden=128, image_size=224, video_size=224, video_frames=8)


@dataclass(frozen=True)
class Server:
    endpoints: Endpoints
    repository: Path
    model: Path

    def cost_model(self) -> CostModel:
        """How the server classes requests: its ONNX models within its engine's class edges."""
        return repository_classes(self.repository)


@contextmanager
def start_server(
    tmp_path_factory: pytest.TempPathFactory,
    media: dict[str, int] | None = None,
    max_pending_requests: int | None = None,
    model_files: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    spec: TinyModelSpec = SPEC,
    settings: Mapping[str, object] | None = None,
    policies: Sequence[str] = (),
) -> Iterator[Server]:
    """A server on a copy of the repository serving a tiny model of `spec`; `media` overrides
    model.json's media limits, `max_pending_requests` its admission limit, `settings` its other
    top-level keys, `model_files` replaces models' `1/model.py` (model name -> source), and `env` adds
    to the server's environment (`RPS_POLICY`, say). With `policies`, the server holds an engine per
    policy behind its own ensemble (`policy_repository`), and not the repository's own."""
    work = tmp_path_factory.mktemp("triton")
    model = tiny_model(tmp_path_factory, spec)
    repository = trained_repository(tmp_path_factory, work / "model_repository")
    settings_file = repository / SETTINGS_FILE
    written = {**json.loads(settings_file.read_text()), **(settings or {})}
    written["media"] = {**written["media"], **(media or {})}
    if max_pending_requests is not None:
        written["max_pending_requests"] = max_pending_requests
    settings_file.write_text(json.dumps(written))
    for name, source in (model_files or {}).items():
        (repository / name / "1" / "model.py").write_text(source)
    configure_cpu_engine_environment(work / "vllm")
    # The engine core must be its own process under AsyncLLM, whatever other tests set.
    server_env = {MODEL_ENV: str(model), "VLLM_ENABLE_V1_MULTIPROCESSING": "1", **(env or {})}
    models: list[str] = []
    if policies:
        repository, models = (
            policy_repository(work / "policies", policies, repository),
            policy_models(policies),
        )
    # Ended outright: what the tests check happens while it serves (the stop's unloading takes ~9 s).
    with local_server(repository, work, env=server_env, models=models, stop_grace_s=0) as endpoints:
        yield Server(endpoints, repository, model)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The repository as it ships, for the session: its tests leave it serving as they found it."""
    with start_server(tmp_path_factory) as running:
        yield running


class Requests:
    """Fresh prompts and media for every request: no two share a prefix or an image."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.media_rng = np.random.default_rng(seed)

    def make(self, modality: Modality, max_tokens: int = 8, stream: bool = True) -> Generation:
        prompt = chat_prompt(filler_text(20, self.rng), modality)
        images: tuple[bytes, ...] = ()
        video = None
        if modality is Modality.IMAGE:
            images = (encode_image(random_image(SPEC.image_size, SPEC.image_size, self.media_rng)),)
        elif modality is Modality.VIDEO:
            # Twice the frames the model takes: preprocess samples them down.
            frames = random_video(2 * SPEC.video_frames, SPEC.video_size, SPEC.video_size, self.media_rng)
            video = encode_video(frames)
        return Generation(
            prompt,
            images,
            video,
            sampling_parameters={"max_tokens": max_tokens, "ignore_eos": True},
            stream=stream,
        )


@pytest.fixture(scope="module")
def requests() -> Requests:
    return Requests()


ENSEMBLE, VLLM_MODEL = p.ENSEMBLE, p.VLLM_MODEL
# Requests to ask a server how it would class them: texts, images and videos of several sizes.
PROBES = [RequestFeatures(Modality.TEXT, tokens, 0) for tokens in (20, 500, 4000)] + [
    RequestFeatures(modality, 40 + visual, visual)
    for modality in (Modality.IMAGE, Modality.VIDEO)
    for visual in (64, 1500, 6000)
]
MODELS = [ENSEMBLE, VLLM_MODEL]


def run(
    server: Server, model: str, request: Generation | dict[str, np.ndarray], timeout_s: float = 300
) -> StreamResult:
    """One request (a generation, or raw input tensors) on a stream of its own, so a stream error is
    its error; waits for its final response or error."""
    tensors = request.tensors() if isinstance(request, Generation) else request
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
    return post_generate(server, model, body)


def post_generate(server: Server, model: str, body: Mapping[str, object]) -> tuple[int, str]:
    """A JSON body to HTTP `generate`, as written; the status code and the reply."""
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
        result = run(server, model, requests.make(Modality.IMAGE, max_tokens=4))
        assert result.error is None, (model, result.error)
        assert result.text
