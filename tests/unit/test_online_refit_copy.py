"""The repository copy the online-refit experiments serve: no cost models of the checkout's, the refit on."""

from __future__ import annotations

from pathlib import Path

from rps_serve.cost.runtime import REPORT_FILE
from rps_serve.local.repository import online_refit_copy
from rps_serve.triton.settings import SETTINGS_FILE, read_settings


def test_the_copy_refits_online_and_starts_without_cost_models(tmp_path: Path) -> None:
    (tmp_path / "model_repository").mkdir()
    (tmp_path / "model_repository" / "stale.onnx").write_text("from an earlier run")
    repository = online_refit_copy(tmp_path, interval_s=3.0)
    assert not list(repository.rglob("*.onnx")) and not (repository / REPORT_FILE).exists()
    online = read_settings(repository / SETTINGS_FILE, repository, {}).cost_model_online
    assert online.enabled and online.interval_s == 3.0
