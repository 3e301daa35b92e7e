"""What the e2e tests' servers share, built once a test session: each tiny model (by its spec) and
the repository with the reference cost models trained into it, which every server copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rps_harness.local.repository import train_reference_cost_models
from rps_harness.local.tiny_model import TinyModelSpec, build_tiny_model
from tests.checkout import REPOSITORY

_models: dict[tuple[Path, TinyModelSpec], Path] = {}
_repositories: dict[Path, Path] = {}


def tiny_model(tmp_path_factory: pytest.TempPathFactory, spec: TinyModelSpec) -> Path:
    """The tiny model of `spec`, built on first use in this session; servers only read it."""
    key = (tmp_path_factory.getbasetemp(), spec)
    if key not in _models:
        model = tmp_path_factory.mktemp("model") / f"tiny-{spec.family.value}"
        build_tiny_model(model, spec)
        _models[key] = model
    return _models[key]


def trained_repository(tmp_path_factory: pytest.TempPathFactory, destination: Path) -> Path:
    """A copy of the checkout's repository at `destination` with the reference cost models (ONNX)
    trained in, as the image is built; trained once a session, copied for each caller to change."""
    base = tmp_path_factory.getbasetemp()
    if base not in _repositories:
        trained = tmp_path_factory.mktemp("trained") / "model_repository"
        ignore = shutil.ignore_patterns("*.onnx", "cost_model_report.json", "__pycache__")
        shutil.copytree(REPOSITORY, trained, ignore=ignore)
        train_reference_cost_models(trained)
        _repositories[base] = trained
    shutil.copytree(_repositories[base], destination)
    return destination
