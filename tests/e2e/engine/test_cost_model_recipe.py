"""The one recipe for a repository's cost models: a profile of the served model, then training on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rps_harness.local.repository import cost_models_present, ensure_cost_models
from rps_serve.cost.runtime import REPORT_FILE
from rps_serve.profiles.records import read_records
from tests.checkout import REPOSITORY


def test_missing_cost_models_are_trained_on_a_profile_of_the_served_model(
    tiny_model: Path, tmp_path: Path
) -> None:
    repository = tmp_path / "model_repository"
    shutil.copytree(REPOSITORY, repository, ignore=shutil.ignore_patterns("*.onnx", REPORT_FILE))
    profiles = tmp_path / "profiles"
    source = ensure_cost_models(repository, tiny_model, profiles)
    profile = profiles / f"{tiny_model.name}.jsonl"
    assert source == f"profile data {profile.name}" and cost_models_present(repository)
    report = json.loads((repository / REPORT_FILE).read_text())
    assert report["source"] == source and report["records"] == len(list(read_records(profile)))
    assert ensure_cost_models(repository, tiny_model, profiles) is None  # there: left as they are
