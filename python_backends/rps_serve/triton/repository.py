"""Build outputs the model repository needs before a server can start: the ONNX cost models and
the tiny model that model.json points to by default."""

from __future__ import annotations

import logging
from pathlib import Path

from rps_serve.cost.runtime import CLASSIFIER_MODEL, ESTIMATOR_MODEL, onnx_path
from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.reference import DEFAULT_REFERENCE
from rps_serve.profiles.synthetic import reference_profile
from rps_serve.tiny_model import TinyModelSpec, build_tiny_model
from rps_serve.triton.server import REPO_ROOT

logger = logging.getLogger(__name__)

REPOSITORY = REPO_ROOT / "model_repository"
TINY_MODEL = REPO_ROOT / "build" / "tiny-qwen2-vl"  # model.json's default "model"


def ensure_cost_models(repository: Path, profile: str = DEFAULT_REFERENCE) -> bool:
    """Train the cost models into `repository` unless both ONNX files are there; True if trained."""
    if all(onnx_path(repository, name).is_file() for name in (ESTIMATOR_MODEL, CLASSIFIER_MODEL)):
        return False
    logger.info("training the cost models on the %s reference profile into %s", profile, repository)
    train_cost_model(
        reference_profile(profile), repository, TrainingOptions(), f"reference profile {profile}"
    )
    return True


def ensure_tiny_model(path: Path, spec: TinyModelSpec | None = None) -> bool:
    """Build the tiny Qwen2-VL at `path` unless one is there; True if built."""
    if (path / "config.json").is_file():
        return False
    logger.info("building the tiny Qwen2-VL into %s", path)
    build_tiny_model(path, spec or TinyModelSpec())
    return True
