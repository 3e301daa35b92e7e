"""The tiers, and shared fixtures: one reference profile and one trained cost-model repository per session.

`tests/unit/` mirrors the package and starts no server; `tests/deploy/` checks the deployment files;
`tests/e2e/` starts a real tritonserver or vLLM engine, one folder per thing it starts, and every test
in it carries the `e2e` marker (`make test-fast` leaves those out).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rps_harness.local.tiny_model import Family, TinyModelSpec, build_tiny_model
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.records import ProfileRecord

REFERENCE_MODEL = "llava-onevision-qwen2-7b"
E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def reference_records() -> list[ProfileRecord]:
    return reference_profile(REFERENCE_MODEL, per_kind=400, seed=1)


@pytest.fixture(scope="session")
def trained_repository(
    tmp_path_factory: pytest.TempPathFactory, reference_records: list[ProfileRecord]
) -> Path:
    out = tmp_path_factory.mktemp("repository")
    train_cost_model(reference_records, out, TrainingOptions(), source="test")
    return out


# What the e2e tests serve (224x224 images -> 64 placeholder tokens, 8-frame videos -> 256), at one layer.
TINY_QWEN = TinyModelSpec(layers=1, hidden=64, image_size=224, video_size=224, video_frames=8)
TINY_LLAVA = TinyModelSpec(
    Family.LLAVA_ONEVISION, layers=1, hidden=64, image_size=384, video_size=384, video_frames=4
)


@pytest.fixture(scope="session")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2-VL's directory, for what the load tools read from it (processor, template, media)."""
    out = tmp_path_factory.mktemp("tiny-qwen2-vl")
    build_tiny_model(out, TINY_QWEN)
    return out


@pytest.fixture(scope="session")
def tiny_llava(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-llava-onevision")
    build_tiny_model(out, TINY_LLAVA)
    return out


@pytest.fixture(scope="session")
def qwen_format(tiny_qwen: Path) -> RequestFormat:
    return RequestFormat.of_model(tiny_qwen)
