"""The cost model refitted while it serves, within bounds, from the engine's observed prefill costs.

RPS-Serve (arXiv 2603.26498) fits the Impact Estimator and the Request Classifier once per model,
offline. Here the prefill times the served engine measures (`cost.observed`) refit both:

- **The estimate**, per modality and as offline (least squares for text, the q0.9 line for image
  and video), on the latest `window` observed records of the modality, after dropping the records
  whose residual from a first fit lies beyond `outlier_mads` median absolute deviations (a step
  slowed by contention, a prefill that shared its step with an encoder). A modality with fewer than
  `min_records` keeps its line. One update moves a line by at most a factor `max_step` at the 10th
  and the 90th percentile of the window's prompt lengths (the new line runs through the two clipped
  points): a burst of odd records moves the fit a little, a lasting difference moves it all the way
  in a few updates. Prompt lengths too alike to fix a slope (a server whose images are all one size)
  scale the line instead of tilting it.
- **The class boundaries**: k-means, as offline, under the new estimate, over the requests the
  repository's fit was trained on (its report's `population`), adopted only where it re-classes more
  than `hysteresis` of them against the boundaries in service, so that the boundaries do not flap
  with every update. Over that fixed population, not over the requests served lately: a class is a
  tier of cost, and the tiers should not move because the mix did (k-means on a text-only hour would
  split texts into three classes; on the tiny model's mixed-iii load, boundaries drawn over the served
  requests class a probe grid 82% as the profile-trained model does, those drawn over the profile's or
  the H100 reference's population with the same lines 100%). A request's class is decided once, at
  arrival, by the fit in service then.

The fit in service is a pair of ONNX models run by onnxruntime, exported as `rps-serve train` exports
them, so a request is classed by the same code whether the fit came from the repository or from here.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import RequestClassifier
from rps_serve.cost.estimator import ImpactEstimator
from rps_serve.cost.model import CostModel
from rps_serve.cost.onnx_export import classifier_to_onnx, estimator_to_onnx
from rps_serve.cost.runtime import CLASSIFIER_MODEL, REPORT_FILE, OnnxCostModel, onnx_path
from rps_serve.cost.training import FittedCostModel, TrainingOptions, fit_of_report, population_of_report
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality, RequestFeatures

logger = logging.getLogger(__name__)

MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation per median absolute deviation
MIN_SECONDS = 1e-6  # a line's value below which the step bound is taken from this floor
MIN_SLOPE_SPAN = 1.5  # how many times the 10th percentile of prompt lengths the 90th must be to refit a slope


@dataclass(frozen=True)
class OnlineOptions:
    """model.json's `cost_model_online`: `false` (or absent) freezes the repository's fit, `true` or an
    object of these fields refits it. Off unless asked: a benchmark's paired runs must class alike."""

    enabled: bool = False
    interval_s: float = 10.0  # how often the served records are read and the fit updated
    min_new_records: int = 20  # observed prefills since the last update before another
    window: int = 256  # latest records per modality the estimate is fitted on
    min_records: int = 8  # a modality's records before its line is refitted
    max_step: float = 2.0  # the most one update multiplies or divides a line's estimate by
    outlier_mads: float = 4.0
    hysteresis: float = 0.05  # share of the population new boundaries must re-class to be adopted

    @classmethod
    def from_setting(cls, value: Any) -> OnlineOptions:
        """From model.json: a boolean, an object of the fields above (on unless it says `enabled:
        false`), or absent (None: off)."""
        if value is None or value is False:
            return cls()
        if value is True:
            return cls(enabled=True)
        if not isinstance(value, Mapping):
            raise ValueError(f"cost_model_online must be true, false or an object, got {value!r}")
        known = {f.name for f in fields(cls)}
        unknown = set(value) - known
        if unknown:
            raise ValueError(
                f"cost_model_online: unknown keys {sorted(unknown)}; expected some of {sorted(known)}"
            )
        options = cls(**{"enabled": True, **value})
        if options.max_step <= 1 or not 0 <= options.hysteresis < 1 or options.interval_s <= 0:
            raise ValueError("cost_model_online: need max_step > 1, 0 <= hysteresis < 1 and interval_s > 0")
        return options


@dataclass(frozen=True)
class CostModelUpdate:
    """What one update did, for the log and the metrics."""

    number: int
    observed: int  # observed prefills so far
    new_records: int  # of them, those that came since the previous update
    lines_before: dict[Modality, PrefillLine]
    lines_after: dict[Modality, PrefillLine]
    abs_error_s: dict[Modality, float]  # mean |estimate - observed| of the new records, fit before
    reclassed: float | None  # share of the population new boundaries would re-class (None: not fitted)
    boundaries_moved: bool
    centroids: list[tuple[float, float]] | None  # per class: mean estimated (prefill s, memory tokens)

    def describe(self) -> str:
        def lines(of: Mapping[Modality, PrefillLine]) -> str:
            return ", ".join(
                f"{m.value} {v.intercept * 1e3:.2f} ms + {v.slope * 1e6:.2f} us/token" for m, v in of.items()
            )

        error = ", ".join(f"{m.value} {e * 1e3:.1f} ms" for m, e in self.abs_error_s.items())
        if self.reclassed is None:
            boundaries = "boundaries kept (no population to draw them over)"
        else:
            verdict = "moved" if self.boundaries_moved else "kept"
            boundaries = f"boundaries {verdict} (refit re-classes {self.reclassed:.1%})"
        return (
            f"cost model update {self.number} after {self.observed} observed prefills: "
            f"[{lines(self.lines_before)}] -> [{lines(self.lines_after)}]; "
            f"error before {error or 'n/a'}; {boundaries}"
        )


def bounded_line(old: PrefillLine, fitted: PrefillLine, tokens: np.ndarray, max_step: float) -> PrefillLine:
    """`fitted`, moved from `old` by at most a factor `max_step` at the 10th and 90th percentile of
    `tokens`. Where those prompt lengths are too alike to fix a slope (the 90th percentile under
    `MIN_SLOPE_SPAN` times the 10th: a server sending one image size), or the fit slopes down, the old
    line is scaled instead, by the bounded ratio at the median: its level follows, its shape stays."""
    low, middle, high = np.percentile(tokens, [10, 50, 90])

    def bounded(x: float) -> float:
        floor = max(old.seconds(x), MIN_SECONDS)
        return float(np.clip(fitted.seconds(x), floor / max_step, floor * max_step))

    if high < MIN_SLOPE_SPAN * max(low, 1.0) or fitted.slope < 0:
        ratio = bounded(middle) / max(old.seconds(middle), MIN_SECONDS)
        return PrefillLine(old.intercept * ratio, old.slope * ratio)
    low_s = bounded(low)
    slope = (bounded(high) - low_s) / (high - low)
    return PrefillLine(low_s - slope * low, slope)


def robust_line(
    estimator: ImpactEstimator, modality: Modality, tokens: np.ndarray, seconds: np.ndarray, mads: float
) -> PrefillLine:
    """The modality's line fitted twice: the second time without the first fit's outliers."""
    line = estimator.fit_line(modality, tokens, seconds)
    residuals = seconds - line.seconds(tokens)
    deviations = np.abs(residuals - np.median(residuals))
    spread = MAD_TO_SIGMA * float(np.median(deviations))
    keep = deviations <= mads * spread
    if spread == 0 or keep.all() or keep.sum() < 2:
        return line
    return estimator.fit_line(modality, tokens[keep], seconds[keep])


class OnlineCostModel(CostModel):
    """The fit in service, refitted by `update` from the records `observe` collects.

    `estimate` may run on one thread while `observe` and `update` run on another: the fit in service
    is one object, replaced whole.
    """

    refits = True

    def __init__(
        self,
        lines: Mapping[Modality, PrefillLine],
        classifier_onnx: bytes,
        training: TrainingOptions,
        options: OnlineOptions,
        population: Sequence[RequestFeatures],
    ) -> None:
        self.options = options
        self._training = training  # the offline fit's settings, kept by every refit
        self._lines = dict(lines)
        self._classifier_onnx = classifier_onnx
        self._served = self._runner(ImpactEstimator.of_lines(lines, training.quantile), classifier_onnx)
        self.num_classes = self._served.num_classes
        self._records = {m: deque[ProfileRecord](maxlen=options.window) for m in Modality}
        self._population = cols.feature_matrix(population)  # the boundaries are drawn over it
        self._new: list[ProfileRecord] = []
        self.observed = 0
        self.updates = 0

    @classmethod
    def from_repository(cls, repository: Path, options: OnlineOptions) -> OnlineCostModel:
        """Starting from the repository's fit: its classifier as exported, its lines, settings and
        population from the training report beside it."""
        report = json.loads((repository / REPORT_FILE).read_text())
        lines, training = fit_of_report(report)
        population = population_of_report(report)
        if not population:
            logger.warning("%s keeps no population: the class boundaries stay; retrain it", REPORT_FILE)
        classifier_onnx = onnx_path(repository, CLASSIFIER_MODEL).read_bytes()
        return cls(lines, classifier_onnx, training, options, population)

    @classmethod
    def from_fit(
        cls,
        model: FittedCostModel,
        training: TrainingOptions,
        options: OnlineOptions,
        population: Sequence[RequestFeatures],
    ) -> OnlineCostModel:
        """Starting from an offline fit in memory (`training` the options it was fitted with, on the
        requests `population`)."""
        classifier_onnx = classifier_to_onnx(model.classifier).SerializeToString()
        return cls(model.estimator.lines_, classifier_onnx, training, options, population)

    @property
    def lines(self) -> dict[Modality, PrefillLine]:
        return dict(self._lines)

    @staticmethod
    def _runner(estimator: ImpactEstimator, classifier_onnx: bytes) -> OnnxCostModel:
        return OnnxCostModel(estimator_to_onnx(estimator).SerializeToString(), classifier_onnx)

    def estimate(self, feature_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # One fit for both steps, whatever `update` does meanwhile.
        return self._served.estimate(feature_matrix)

    def observe(self, records: Iterable[ProfileRecord]) -> None:
        for record in records:
            self._records[record.modality].append(record)
            self._new.append(record)
            self.observed += 1

    def update(self) -> CostModelUpdate | None:
        """Refit from the records observed so far, if `min_new_records` came since the last update."""
        if len(self._new) < self.options.min_new_records:
            return None
        new, self._new = self._new, []
        before, served = self._lines, self._served
        error = self._abs_error(served, new)
        lines = {m: self._refit(m, line) for m, line in before.items()}
        estimator = ImpactEstimator.of_lines(lines, self._training.quantile)
        reclassed, moved, centroids = self._refit_boundaries(estimator, served)
        self._lines = lines
        self._served = self._runner(estimator, self._classifier_onnx)
        self.updates += 1
        update = CostModelUpdate(
            self.updates,
            self.observed,
            len(new),
            dict(before),
            dict(lines),
            error,
            reclassed,
            moved,
            centroids,
        )
        logger.info("%s", update.describe())
        return update

    def _refit(self, modality: Modality, old: PrefillLine) -> PrefillLine:
        records = self._records[modality]
        if len(records) < self.options.min_records:
            return old
        tokens = np.array([r.prompt_tokens for r in records], dtype=np.float64)
        seconds = np.array([r.admission_s for r in records], dtype=np.float64)
        estimator = ImpactEstimator(self._training.quantile)
        fitted = robust_line(estimator, modality, tokens, seconds, self.options.outlier_mads)
        return bounded_line(old, fitted, tokens, self.options.max_step)

    def _refit_boundaries(
        self, estimator: ImpactEstimator, served: OnnxCostModel
    ) -> tuple[float | None, bool, list[tuple[float, float]] | None]:
        if not len(self._population):
            return None, False, None
        cost = estimator.predict_cost(self._population)
        kept = served.classify(cost)
        candidate = RequestClassifier(
            num_classes=self._training.num_classes,
            power_transform=self._training.power_transform,
            memory_feature=self._training.memory_feature,
            random_state=self._training.seed,
        ).fit(cost)
        refitted = candidate.predict(cost)
        reclassed = float(np.mean(refitted != kept))
        moved = reclassed > self.options.hysteresis
        if moved:
            self._classifier_onnx = classifier_to_onnx(candidate).SerializeToString()
        levels = refitted if moved else kept
        centroids = [
            (
                float(cost[levels == k, cols.PREFILL_S].mean()),
                float(cost[levels == k, cols.MEMORY_TOKENS].mean()),
            )
            if (levels == k).any()
            else (float("nan"), float("nan"))
            for k in range(self.num_classes)
        ]
        return reclassed, moved, centroids

    @staticmethod
    def _abs_error(served: OnnxCostModel, records: list[ProfileRecord]) -> dict[Modality, float]:
        estimates = served.cost(cols.feature_matrix([r.features for r in records]))[:, cols.PREFILL_S]
        observed = np.array([r.admission_s for r in records])
        modalities = np.array([r.modality.index for r in records])
        return {
            m: float(np.mean(np.abs(estimates - observed)[modalities == m.index]))
            for m in Modality
            if (modalities == m.index).any()
        }
