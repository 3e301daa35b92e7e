"""Offline training: fit the cost models on profile records and write their ONNX files and a report."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import MemoryFeature, RequestClassifier
from rps_serve.cost.estimator import ImpactEstimator
from rps_serve.cost.model import CostModel
from rps_serve.cost.onnx_export import classifier_to_onnx, estimator_to_onnx
from rps_serve.cost.runtime import CLASSIFIER_MODEL, ESTIMATOR_MODEL, REPORT_FILE, onnx_path
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import DEFAULT_REFERENCE, PrefillLine, reference_model
from rps_serve.requests import Modality, RequestClass, RequestFeatures

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingOptions:
    num_classes: int = 3
    power_transform: bool = False
    memory_feature: MemoryFeature = MemoryFeature.PREFILL_TOKENS
    quantile: float = 0.9
    seed: int = 0


@dataclass(frozen=True)
class FittedCostModel(CostModel):
    """A fitted estimator and classifier pair, run in memory (the same functions as its ONNX export)."""

    estimator: ImpactEstimator
    classifier: RequestClassifier

    @property
    def num_classes(self) -> int:  # type: ignore[override]  # read-only here: the fit fixes it
        return self.classifier.num_classes

    def cost(self, feature_matrix: np.ndarray) -> np.ndarray:
        return self.estimator.predict_cost(feature_matrix)

    def classify(self, cost: np.ndarray) -> np.ndarray:
        return self.classifier.predict(cost)


def fit_cost_model(records: Sequence[ProfileRecord], options: TrainingOptions) -> FittedCostModel:
    estimator = ImpactEstimator(quantile=options.quantile).fit(records)
    cost = estimator.predict_cost(cols.feature_matrix([r.features for r in records]))
    classifier = RequestClassifier(
        num_classes=options.num_classes,
        power_transform=options.power_transform,
        memory_feature=options.memory_feature,
        random_state=options.seed,
    ).fit(cost)
    return FittedCostModel(estimator, classifier)


def time_scale(records: Sequence[ProfileRecord], reference: str) -> float:
    """How many times longer the profiled requests took to admit than `reference`'s published fit
    says the same requests take: the median of the per-request ratios of measured seconds (one
    number for the whole model, robust to a modality whose times are off). Measured, not fitted:
    a small profile's fitted lines can be far off at its own requests (a q0.9 line through a few
    images, a text line whose intercept is noise), and the clock would inherit that. For a profile
    of the reference itself, a little under 1: its image and video lines are 90th percentiles, above
    most of their requests."""
    lines = reference_model(reference).lines
    ratios = [
        r.admission_s / lines[r.modality].seconds(r.prompt_tokens)
        for r in records
        if lines[r.modality].seconds(r.prompt_tokens) > 0
    ]
    return float(np.median(ratios)) if ratios else 1.0


def _report(model: FittedCostModel, records: Sequence[ProfileRecord], source: str) -> dict[str, Any]:
    estimator, classifier = model.estimator, model.classifier
    k = classifier.num_classes
    modalities = np.array([r.modality.index for r in records])
    labels = classifier.pipeline_.named_steps["kmeans"].labels_
    classes = []
    for level in range(k):
        in_class = labels == level
        classes.append(
            {
                "level": level,
                "name": RequestClass.for_level(level, k).label,
                "count": int(in_class.sum()),
                "centroid_scaled": [float(x) for x in classifier.centroids_[level]],
                "count_by_modality": {
                    m.value: int((in_class & (modalities == m.index)).sum()) for m in Modality
                },
            }
        )
    return {
        "source": source,
        "records": len(records),
        "aging_time_scale": time_scale(records, DEFAULT_REFERENCE),
        "aging_time_scale_note": (
            f"the served model's measured prefill over {DEFAULT_REFERENCE}'s fit on H100, for the "
            "profiled requests (median): the class priorities age on a clock this much slower "
            "(scheduling.parameters)"
        ),
        "estimator": {
            "quantile_modalities": {"image": estimator.quantile, "video": estimator.quantile},
            "lines": {
                m.value: {"intercept": line.intercept, "slope": line.slope}
                for m, line in estimator.lines_.items()
            },
            "mae_s": {m.value: mae for m, mae in estimator.mae_s_.items()},
            "mae_note": "in-sample mean absolute error of prefill seconds per modality",
        },
        "classifier": {
            "num_classes": k,
            "power_transform": classifier.power_transform,
            "memory_feature": classifier.memory_feature.value,
            "seed": classifier.random_state,
            "classes": classes,
        },
        # The requests trained on, as cost-model feature rows (modality index, prompt tokens, modality
        # tokens): the population an online refit draws the class boundaries over (`cost.online`).
        "population": cols.feature_matrix([r.features for r in records]).astype(int).tolist(),
    }


def fit_of_report(report: Mapping[str, Any]) -> tuple[dict[Modality, PrefillLine], TrainingOptions]:
    """The estimator's lines and the training settings a report (`_report`) records."""
    estimator, classifier = report["estimator"], report["classifier"]
    lines = {
        Modality(name): PrefillLine(float(line["intercept"]), float(line["slope"]))
        for name, line in estimator["lines"].items()
    }
    options = TrainingOptions(
        num_classes=int(classifier["num_classes"]),
        power_transform=bool(classifier["power_transform"]),
        memory_feature=MemoryFeature(classifier["memory_feature"]),
        quantile=float(estimator["quantile_modalities"]["image"]),
        seed=int(classifier.get("seed", TrainingOptions.seed)),
    )
    return lines, options


def population_of_report(report: Mapping[str, Any]) -> list[RequestFeatures]:
    """The requests a report's fit was trained on (none in a report written before it kept them)."""
    rows = report.get("population", [])
    return cols.requests_of(np.array(rows, dtype=np.float64).reshape(-1, cols.NUM_FEATURES))


def train_cost_model(
    records: Sequence[ProfileRecord], out_dir: Path, options: TrainingOptions, source: str
) -> dict[str, Any]:
    """Fit on `records`; write both ONNX models under `out_dir` in model-repository layout, and the report."""
    model = fit_cost_model(records, options)
    exports = {
        ESTIMATOR_MODEL: estimator_to_onnx(model.estimator),
        CLASSIFIER_MODEL: classifier_to_onnx(model.classifier),
    }
    for name, proto in exports.items():
        path = onnx_path(out_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save_model(proto, str(path))
        logger.info("wrote %s", path)
    report = _report(model, records, source)
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    return report
