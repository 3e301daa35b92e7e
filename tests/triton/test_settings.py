"""model.json and its environment overrides."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rps_serve.scheduling.parameters import Policy
from rps_serve.triton.repository import REPOSITORY
from rps_serve.triton.settings import load_settings


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    shutil.copytree(
        REPOSITORY / "vllm_model", tmp_path / "repo" / "vllm_model", ignore=shutil.ignore_patterns("1")
    )
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    return tmp_path / "repo"


def test_the_shipped_settings_point_into_the_checkout(repository: Path) -> None:
    settings = load_settings(repository, {"RPS_MODEL": "../model"})
    assert settings.model == repository.parent / "model"
    assert settings.cost_model == repository
    assert settings.policy is Policy.RPS
    kwargs = settings.engine_kwargs()
    assert kwargs["scheduler_cls"].endswith("RPSScheduler")
    assert kwargs["model"] == str(repository.parent / "model")
    assert kwargs["disable_log_stats"] is False


def test_environment_overrides(repository: Path) -> None:
    settings = load_settings(
        repository,
        {
            "RPS_MODEL": "../model",
            "RPS_POLICY": "fcfs",
            "RPS_ENGINE_ARGS": json.dumps({"max_model_len": 512}),
        },
    )
    assert settings.policy is Policy.FCFS
    assert settings.engine_kwargs()["scheduling_policy"] == "fcfs"
    assert settings.engine_args["max_model_len"] == 512


def test_a_missing_model_says_how_to_build_it(repository: Path) -> None:
    with pytest.raises(ValueError, match="make tiny-model"):
        load_settings(repository, {"RPS_MODEL": "../nowhere"})
