"""A real tritonserver (nvidia-pytriton's binary) serving a copy of `model_repository/` with a real
vLLM engine on a tiny random Qwen2-VL; one server per test module."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.requests import Modality
from rps_serve.tiny_model import TinyModelSpec, build_tiny_model
from rps_serve.triton.client import Generation, encode_image, encode_video
from rps_serve.triton.repository import REPOSITORY, ensure_cost_models
from rps_serve.triton.server import Endpoints, local_server
from rps_serve.triton.settings import MODEL_ENV, SETTINGS_FILE
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from rps_serve.workload.media import random_image, random_video
from rps_serve.workload.prompts import chat_prompt, filler_text

# 224x224 image -> 64 placeholder tokens; videos are sampled to 8 frames of 224x224 -> 256.
SPEC = TinyModelSpec(layers=2, hidden=128, image_size=224, video_size=224, video_frames=8)


@dataclass(frozen=True)
class Server:
    endpoints: Endpoints
    repository: Path
    model: Path

    def cost_model(self) -> OnnxCostModel:
        return OnnxCostModel.from_repository(self.repository)


@contextmanager
def start_server(
    tmp_path_factory: pytest.TempPathFactory,
    media: dict[str, int] | None = None,
    max_pending_requests: int | None = None,
    model_files: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """A server on a copy of the repository; `media` overrides model.json's media limits,
    `max_pending_requests` its admission limit, and `model_files` replaces models' `1/model.py`
    (model name -> source)."""
    work = tmp_path_factory.mktemp("triton")
    model = work / "tiny-qwen2-vl"
    build_tiny_model(model, SPEC)
    repository = work / "model_repository"
    shutil.copytree(REPOSITORY, repository, ignore=shutil.ignore_patterns("*.onnx", "cost_model_report.json"))
    ensure_cost_models(repository)
    settings_file = repository / SETTINGS_FILE
    settings = json.loads(settings_file.read_text())
    settings["media"] = {**settings["media"], **(media or {})}
    if max_pending_requests is not None:
        settings["max_pending_requests"] = max_pending_requests
    settings_file.write_text(json.dumps(settings))
    for name, source in (model_files or {}).items():
        (repository / name / "1" / "model.py").write_text(source)
    configure_cpu_engine_environment(work / "vllm")
    # The engine core must be its own process under AsyncLLM, whatever other tests set.
    env = {MODEL_ENV: str(model), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    with local_server(repository, work, env=env) as endpoints:
        yield Server(endpoints, repository, model)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
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
