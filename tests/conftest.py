"""The tiers, and shared fixtures: one reference profile and one trained cost-model repository per session.

`tests/unit/` mirrors the package and starts no server; `tests/deploy/` checks the deployment files;
`tests/e2e/` starts a real tritonserver or vLLM engine, one folder per thing it starts, and every test
in it carries the `e2e` marker (`make test-fast` leaves those out).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.synthetic import reference_profile

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
