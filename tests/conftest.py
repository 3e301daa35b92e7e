"""Shared fixtures: one reference profile and one trained cost-model repository per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.synthetic import reference_profile

REFERENCE_MODEL = "llava-onevision-qwen2-7b"


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
