"""Serving-side cost model: runs the exported ONNX files with onnxruntime (no pickles)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from rps_serve.cost.model import CostModel, ModalityClasses
from rps_serve.cost.onnx_export import COST_TENSOR, FEATURES_INPUT, LEVEL_OUTPUT, NUM_CLASSES_KEY

ESTIMATOR_MODEL = "impact_estimator"
CLASSIFIER_MODEL = "request_classifier"
REPORT_FILE = "cost_model_report.json"  # beside the ONNX models: what they were trained on, and how


def onnx_path(repository: Path, model: str, version: int = 1) -> Path:
    """Where Triton expects `model`'s ONNX file inside a model repository."""
    return repository / model / str(version) / "model.onnx"


PROFILE_SOURCE = "profile data "  # a report's `source` for a cost model trained on a profile file


def profile_source(profile: Path) -> str:
    """The report's `source` of a cost model trained on `profile`."""
    return f"{PROFILE_SOURCE}{profile.name}"


def trained_profile_name(repository: Path) -> str | None:
    """The name of the profile file the repository's cost model was trained on (None: a reference's)."""
    source = str(json.loads((repository / REPORT_FILE).read_text()).get("source", ""))
    return source.removeprefix(PROFILE_SOURCE) if source.startswith(PROFILE_SOURCE) else None


def aging_time_scale(repository: Path) -> float:
    """How many times slower than the paper's reference the repository's cost model is
    (`cost.training`'s `aging_time_scale`), the clock the class priorities age on; 1 for a report
    without it."""
    report = repository / REPORT_FILE
    if not report.is_file():
        return 1.0
    return float(json.loads(report.read_text()).get("aging_time_scale", 1.0))


def _session(model: Path | bytes) -> ort.InferenceSession:
    """An onnxruntime session of a model file, or of a serialized model (an online refit's)."""
    options = ort.SessionOptions()
    # One request at a time is the common case: thread hand-offs cost more than they save.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])


class OnnxCostModel(CostModel):
    """Impact Estimator and Request Classifier as loaded from a model repository (or serialized)."""

    def __init__(self, estimator: Path | bytes, classifier: Path | bytes) -> None:
        for path in (estimator, classifier):
            if isinstance(path, Path) and not path.is_file():
                raise FileNotFoundError(f"{path} not found; create it with `rps-serve train --out DIR`")
        self._estimator = _session(estimator)
        self._classifier = _session(classifier)
        props = self._classifier.get_modelmeta().custom_metadata_map
        self.num_classes = int(props[NUM_CLASSES_KEY])

    @classmethod
    def from_repository(cls, repository: Path) -> OnnxCostModel:
        return cls(onnx_path(repository, ESTIMATOR_MODEL), onnx_path(repository, CLASSIFIER_MODEL))

    def cost(self, feature_matrix: np.ndarray) -> np.ndarray:
        out: np.ndarray = self._estimator.run(
            [COST_TENSOR], {FEATURES_INPUT: feature_matrix.astype(np.float32, copy=False)}
        )[0]
        return out

    def classify(self, cost: np.ndarray) -> np.ndarray:
        levels: np.ndarray = self._classifier.run(
            [LEVEL_OUTPUT], {COST_TENSOR: cost.astype(np.float32, copy=False)}
        )[0]
        return levels


def cost_model_at(repository: Path | None) -> CostModel:
    """The cost model `rps-serve train` wrote to `repository`; without one, the modality's classes."""
    return ModalityClasses() if repository is None else OnnxCostModel.from_repository(repository)
