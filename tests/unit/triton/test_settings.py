"""model.json and its environment overrides."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.triton.settings import FrontEndMode, ServingSettings, load_settings, read_settings
from tests.checkout import REPOSITORY


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
    assert settings.policy is Policy.HEADROOM
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


def test_the_scheduler_settings_are_overridden_key_by_key(repository: Path) -> None:
    file = repository / "vllm_model" / "model.json"
    shipped = json.loads(file.read_text())
    file.write_text(json.dumps({**shipped, "rps": {"max_preemptions": 1, "chunk_cap_tokens": 0}}))
    settings = load_settings(
        repository, {"RPS_MODEL": "../model", "RPS_SCHEDULER": json.dumps({"chunk_cap_tokens": 384})}
    )
    assert settings.rps == {"max_preemptions": 1, "chunk_cap_tokens": 384}
    rps = settings.engine_kwargs()["additional_config"]["rps"]
    assert (rps["max_preemptions"], rps["chunk_cap_tokens"]) == (1, 384)


def test_a_missing_model_says_how_to_build_it(repository: Path) -> None:
    with pytest.raises(ValueError, match="make tiny-model"):
        load_settings(repository, {"RPS_MODEL": "../nowhere"})


def test_async_scheduling_in_the_engine_arguments_selects_the_async_scheduler(repository: Path) -> None:
    env = {"RPS_MODEL": "../model", "RPS_ENGINE_ARGS": json.dumps({"async_scheduling": True})}
    assert load_settings(repository, env).engine_kwargs()["scheduler_cls"].endswith(".RPSAsyncScheduler")
    assert (
        load_settings(repository, {"RPS_MODEL": "../model"})
        .engine_kwargs()["scheduler_cls"]
        .endswith(".RPSScheduler")
    )


def test_a_deployment_model_json_is_read_before_its_weights_exist(tmp_path: Path) -> None:
    file = tmp_path / "model.json"
    file.write_text(
        json.dumps({"model": "/models/not-mounted-yet", "engine_args": {"tensor_parallel_size": 4}})
    )
    settings = read_settings(file, tmp_path, {})
    assert settings.model == Path("/models/not-mounted-yet")
    assert settings.engine_args == {"tensor_parallel_size": 4}
    file.write_text(json.dumps({"model": "/models/x", "engine_arguments": {}}))
    with pytest.raises(ValueError, match="unknown settings \\['engine_arguments'\\]"):
        read_settings(file, tmp_path, {})
    file.write_text(json.dumps({"policy": "rps"}))
    with pytest.raises(ValueError, match="no 'model'"):
        read_settings(file, tmp_path, {})


def _settings(tmp_path: Path, **keys: object) -> ServingSettings:
    """A deployment's model.json with `keys` beside its model, as the server reads it."""
    file = tmp_path / "model.json"
    file.write_text(json.dumps({"model": "/models/m", **keys}))
    return read_settings(file, tmp_path)


@pytest.mark.parametrize("value", [0, -3, 2.5, "64", True])
def test_max_pending_requests_must_be_a_positive_integer(tmp_path: Path, value: object) -> None:
    with pytest.raises(ValueError, match="max_pending_requests"):
        _settings(tmp_path, max_pending_requests=value)


def test_max_pending_requests_is_unbounded_unless_set(tmp_path: Path) -> None:
    assert _settings(tmp_path).max_pending_requests is None
    assert _settings(tmp_path, max_pending_requests=8).max_pending_requests == 8


def test_the_engine_restart_deadline_is_derived_unless_set(tmp_path: Path) -> None:
    assert _settings(tmp_path).engine_restart_deadline_s is None
    assert _settings(tmp_path, engine_restart_deadline_s=300).engine_restart_deadline_s == 300.0
    for value in (0, -1, "300", True, float("inf")):
        with pytest.raises(ValueError, match="engine_restart_deadline_s"):
            _settings(tmp_path, engine_restart_deadline_s=value)


@pytest.mark.parametrize(
    ("policy", "shipped"),
    [("rps", FrontEndMode.CLASS), ("static", FrontEndMode.CLASS), ("fcfs", FrontEndMode.VLLM),
     ("vllm-priority", FrontEndMode.VLLM), ("modality-priority", FrontEndMode.VLLM)],
)  # fmt: skip
def test_each_policy_ships_with_its_front_end_and_either_can_be_chosen(
    repository: Path, policy: str, shipped: FrontEndMode
) -> None:
    env = {"RPS_MODEL": "../model", "RPS_POLICY": policy}
    assert load_settings(repository, env).front_end_mode is shipped
    for mode in FrontEndMode:
        assert load_settings(repository, {**env, "RPS_FRONT_END": mode.value}).front_end_mode is mode


def test_an_unknown_front_end_is_refused_with_the_choices(repository: Path) -> None:
    with pytest.raises(ValueError, match="class, vllm"):
        load_settings(repository, {"RPS_MODEL": "../model", "RPS_FRONT_END": "fastest"})


def test_modality_priority_is_stock_vllm_priority_by_modality(repository: Path) -> None:
    settings = load_settings(repository, {"RPS_MODEL": "../model", "RPS_POLICY": "modality-priority"})
    kwargs = settings.engine_kwargs()
    assert kwargs["scheduling_policy"] == "priority" and "scheduler_cls" not in kwargs
    assert [settings.policy.request_priority(2, m) for m in Modality] == [m.index for m in Modality]
    assert Policy.VLLM_PRIORITY.request_priority(2, Modality.TEXT) == 2
