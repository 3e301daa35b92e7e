"""The repository copies the comparisons serve: the online-refit experiments' (no cost models of the
checkout's, the refit on) and the one with an engine per policy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rps_harness.local.repository import (
    FRONT_MODELS,
    engine_model,
    ensemble_model,
    online_refit_copy,
    policy_models,
    policy_repository,
)
from rps_harness.sim.simulator import served_settings
from rps_serve.cost.runtime import REPORT_FILE
from rps_serve.triton import protocol as p
from rps_serve.triton.run_log import RunLog
from rps_serve.triton.settings import RUN_LOG_ENV, SETTINGS_FILE, load_settings, read_settings
from tests.checkout import REPOSITORY


def test_the_copy_refits_online_and_starts_without_cost_models(tmp_path: Path) -> None:
    (tmp_path / "model_repository").mkdir()
    (tmp_path / "model_repository" / "stale.onnx").write_text("from an earlier run")
    repository = online_refit_copy(tmp_path, interval_s=3.0)
    assert not list(repository.rglob("*.onnx")) and not (repository / REPORT_FILE).exists()
    online = read_settings(repository / SETTINGS_FILE, repository, {}).cost_model_online
    assert online.enabled and online.interval_s == 3.0


def _config_names(config: Path) -> list[str]:
    return [line.strip() for line in config.read_text().splitlines() if "name:" in line]


def test_each_policy_gets_its_engine_behind_its_own_ensemble(tmp_path: Path) -> None:
    policies = ["fcfs", "modality-priority", "rps", "headroom-cost"]
    copy = policy_repository(tmp_path, policies, REPOSITORY)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    model = {"RPS_MODEL": str(tmp_path / "model")}
    for policy in policies:
        engine, ensemble = copy / engine_model(policy), copy / ensemble_model(policy)
        assert f'name: "{engine.name}"' in _config_names(engine / "config.pbtxt")
        names = _config_names(ensemble / "config.pbtxt")
        assert names[0] == f'name: "{ensemble.name}"'
        # The ensemble's last step is its policy's engine; the front steps are the shared models.
        steps = [n.removeprefix('model_name: "').strip('"') for n in names if n.startswith("model_name")]
        assert steps == [*FRONT_MODELS, engine.name]
        settings = load_settings(copy, model, engine.name)
        served, scheduler = served_settings(policy)
        assert settings.policy is served
        # A variant's settings over the checkout's own (those it does not name stay).
        assert settings.rps == {**read_settings(REPOSITORY / SETTINGS_FILE, copy, {}).rps, **scheduler}
    # The copy's own engine keeps the checkout's settings (preprocess reads them), and is not loaded.
    assert read_settings(copy / SETTINGS_FILE, copy, {}) == read_settings(
        REPOSITORY / SETTINGS_FILE, copy, {}
    )
    loaded = policy_models(policies)
    assert p.VLLM_MODEL not in loaded and p.ENSEMBLE not in loaded
    assert set(loaded) == {*FRONT_MODELS, *map(engine_model, policies), *map(ensemble_model, policies)}
    assert all((copy / name / "config.pbtxt").is_file() for name in loaded)


def test_a_repository_whose_configs_read_otherwise_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(REPOSITORY, source, ignore=shutil.ignore_patterns("__pycache__"))
    config = source / p.ENSEMBLE / "config.pbtxt"
    config.write_text(config.read_text().replace(f'model_name: "{p.VLLM_MODEL}"', 'model_name: "other"'))
    with pytest.raises(ValueError, match="expected"):
        policy_repository(tmp_path / "work", ["rps"], source)


def test_each_engine_writes_its_own_run_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUN_LOG_ENV, str(tmp_path / "{model}.jsonl"))
    for policy in ("fcfs", "rps"):
        log = RunLog.from_environment(engine_model(policy))
        assert log is not None
        log.write("lag", lag_s=0.0)
        log.flush()
    assert sorted(f.name for f in tmp_path.glob("*.jsonl")) == [
        "vllm_model-fcfs.jsonl",
        "vllm_model-rps.jsonl",
    ]
    monkeypatch.delenv(RUN_LOG_ENV)
    assert RunLog.from_environment(p.VLLM_MODEL) is None
