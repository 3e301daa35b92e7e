"""Paired comparison of serving policies: a candidate's metric over a baseline's, with a 95% interval
over runs.

Every policy replays the same trace for seed i, so a policy's evidence is one `RequestRecords` per
seed, in seed order. The run is the unit of evidence: the requests of one run share its bursts and
the machine's state, so they are not independent samples. Each seed gives one ratio (the candidate's
metric over the baseline's on that trace, steady window only); the estimate is their geometric mean
and the interval a Student-t interval on their logarithms (n - 1 degrees of freedom), mapped back.
The pairing cancels what the two runs of a trace share (a trace with more videos is slower under
both). Why not a bootstrap over seeds: with 3 seeds it can say nothing wider than the best and the
worst seed, which hold the true ratio between them only 75% of the time; the t-interval widens with
few seeds as it should (its coverage is measured in tests/unit/test_comparison.py on synthetic runs
with a per-run effect and bursty requests).

A ratio is refused, with its reason, rather than computed over part of the evidence: where a run has
requests that did not complete (refused, failed or lost would silently leave the metric), where a
run has too few values for a percentile (`min_values`), and where fewer than two seeds leave no
interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from rps_harness.metrics import STEADY_STATE_TRIM, RequestRecords
from rps_harness.workload.shapes import RequestKind
from rps_serve.requests import Modality, RequestClass
from rps_serve.scheduling.parameters import Policy

_SHORT_TEXT = list(RequestKind).index(RequestKind.SHORT_TEXT)
# A percentile of a run is measured only where at least this many of the run's values lie beyond
# it: P90 needs 30 values, P99 300 (below that, P99 is the run's maximum, one request's bad luck).
TAIL_VALUES = 3


@dataclass(frozen=True)
class Metric:
    """A named statistic of the values `values` picks from a run's records: their mean, or their
    `percentile` (0-100) where given. NaN values (requests that did not get that far) are left out."""

    name: str
    values: Callable[[RequestRecords], np.ndarray]
    percentile: float | None = None

    def of(self, records: RequestRecords) -> float:
        """The statistic; NaN where there is no value."""
        kept = _finite_part(self.values(records))
        if not kept.size:
            return math.nan
        if self.percentile is None:
            return float(kept.mean())
        return _percentile(kept, self.percentile)

    @property
    def min_values(self) -> int:
        """The fewest values a run needs for the statistic (`TAIL_VALUES` beyond a percentile)."""
        if self.percentile is None:
            return 1
        return math.ceil(TAIL_VALUES / (1 - self.percentile / 100) - 1e-9)

    def count(self, records: RequestRecords) -> int:
        return int(_finite_part(self.values(records)).size)


def _finite_part(values: np.ndarray) -> np.ndarray:
    return values[~np.isnan(values)]


def _percentile(kept: np.ndarray, q: float) -> float:
    """np.percentile's default (linear interpolation between the closest ranks), on a partial sort."""
    rank = (kept.size - 1) * q / 100
    below = math.floor(rank)
    above = min(below + 1, kept.size - 1)
    part = np.partition(kept, (below, above))
    return float(part[below] + (rank - below) * (part[above] - part[below]))


def _ttft_of(modality: Modality) -> Callable[[RequestRecords], np.ndarray]:
    return lambda records: records.ttft[records.modality == modality.index]


def _short_text_ttft(records: RequestRecords) -> np.ndarray:
    """TTFT of the short texts (the workload's kind, not a class): the requests a long prefill ahead
    of them delays most; none where the records do not say the kind."""
    if records.kind is None:
        return np.empty(0)
    return records.ttft[records.kind == _SHORT_TEXT]


def _sand_ttft(records: RequestRecords) -> np.ndarray:
    """TTFT of the requests the cost model put in the lightest class, whatever their modality."""
    return records.ttft[records.level == 0]


def _tpot(records: RequestRecords) -> np.ndarray:
    return records.tpot


def _norm_latency(records: RequestRecords) -> np.ndarray:
    return records.norm_latency


HEADLINE_METRICS: tuple[Metric, ...] = (
    Metric("text P90 TTFT", _ttft_of(Modality.TEXT), 90),
    Metric("short-text P90 TTFT", _short_text_ttft, 90),
    Metric("sand P90 TTFT", _sand_ttft, 90),
    Metric("text mean TTFT", _ttft_of(Modality.TEXT)),
    Metric("video mean TTFT", _ttft_of(Modality.VIDEO)),
    Metric("video P99 TTFT", _ttft_of(Modality.VIDEO), 99),
    Metric("TPOT mean", _tpot),
    Metric("normalized latency mean", _norm_latency),
)


def steady(runs: Sequence[RequestRecords], warm_up: float = STEADY_STATE_TRIM) -> list[RequestRecords]:
    """Each run restricted to its steady-state window: from the first `warm_up` of its arrivals (the
    ramp-up) to the last 10% (the drain; `RequestRecords.steady_state`)."""
    return [run.select(run.steady_state(warm_up=warm_up)) for run in runs]


@dataclass(frozen=True)
class Ratio:
    """Candidate's metric over the baseline's: the geometric mean of the seeds' ratios and its
    interval over seeds; or, where `refused` says why, no ratio (NaN estimate and interval)."""

    estimate: float
    low: float
    high: float
    seeds: int
    requests: int  # candidate requests in the steady windows of the seeds
    per_seed: tuple[float, ...] = ()  # the ratio of each seed's runs alone, in seed order
    refused: str = ""

    @property
    def measured(self) -> bool:
        return not self.refused and math.isfinite(self.low) and math.isfinite(self.high)

    def differs(self) -> bool:
        """Whether the interval excludes 1."""
        return self.measured and (self.high < 1 or self.low > 1)

    def meets(self, target: float) -> bool:
        """Whether the ratio is at most `target`: a target holds only if its whole interval does."""
        return self.measured and self.high <= target

    def verdict(self) -> str:
        if not self.measured:
            return "not measured"
        if self.high < 1:
            return "faster"
        if self.low > 1:
            return "slower"
        return "no difference measured"

    def __str__(self) -> str:
        if not self.measured:
            return f"not measured ({self.refused or 'no interval'})"
        return f"{self.estimate:.2f}x [{self.low:.2f}, {self.high:.2f}] n={self.seeds}"

    def marked(self) -> str:
        """As `str`, with " =" after an interval that includes 1 (no difference measured)."""
        return f"{self}{' =' if self.measured and not self.differs() else ''}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ratio:
        """A ratio as `to_json` wrote it (the verdict is derived again)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


def log_t_interval(ratios: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of positive `ratios` and the Student-t interval of their mean logarithm, mapped
    back: (estimate, low, high). Two ratios at least."""
    logs = np.log(np.asarray(ratios, dtype=float))
    n = logs.size
    if n < 2:
        raise ValueError(f"an interval needs two ratios at least, got {n}")
    centre = float(logs.mean())
    half = float(student_t.ppf((1 + confidence) / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def _refusal(
    candidate: Sequence[RequestRecords], baseline: Sequence[RequestRecords], metric: Metric, warm_up: float
) -> str:
    """Why the runs cannot give `metric`'s ratio; empty where they can."""
    for name, runs in (("candidate", candidate), ("baseline", baseline)):
        unanswered = sum(int((~run.completed).sum()) for run in runs)
        if unanswered:
            return f"{name} has {unanswered} requests not completed"
    for seed, runs in enumerate(zip(steady(candidate, warm_up), steady(baseline, warm_up), strict=True)):
        fewest = min(metric.count(run) for run in runs)
        if fewest < metric.min_values:
            return f"seed {seed}: {fewest} values, {metric.name} needs {metric.min_values}"
    if len(candidate) < 2:
        return "one seed: no interval"
    return ""


def paired_ratio(
    candidate: Sequence[RequestRecords],
    baseline: Sequence[RequestRecords],
    metric: Metric,
    confidence: float = 0.95,
    warm_up: float = STEADY_STATE_TRIM,
) -> Ratio:
    """`metric` of the candidate's runs over the baseline's, seed by seed over each run's steady
    window (from the first `warm_up` of its arrivals; `steady`), and the interval over seeds
    (`log_t_interval`).

    `candidate[i]` and `baseline[i]` are the two policies' whole runs of seed i's trace (every
    request, so that one that did not complete refuses the ratio, wherever it arrived).
    """
    if len(candidate) != len(baseline):
        raise ValueError(f"candidate has {len(candidate)} runs and baseline {len(baseline)}: not paired")
    if not candidate:
        raise ValueError("no runs to compare")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    sizes = [len(run.arrival_s) for run in candidate], [len(run.arrival_s) for run in baseline]
    if sizes[0] != sizes[1]:
        raise ValueError(
            f"requests per seed differ (candidate {sizes[0]}, baseline {sizes[1]}): not the same traces"
        )

    windows = steady(candidate, warm_up), steady(baseline, warm_up)
    per_seed = tuple(_ratio(metric.of(c), metric.of(b)) for c, b in zip(*windows, strict=True))
    requests = sum(len(run.arrival_s) for run in windows[0])
    refused = _refusal(candidate, baseline, metric, warm_up)
    if not refused and not all(math.isfinite(r) and r > 0 for r in per_seed):
        refused = "a seed's ratio is zero or not finite"
    if refused:
        return Ratio(math.nan, math.nan, math.nan, len(candidate), requests, per_seed, refused)
    estimate, low, high = log_t_interval(per_seed, confidence)
    return Ratio(estimate, low, high, len(candidate), requests, per_seed)


def _ratio(candidate: float, baseline: float) -> float:
    # A zero or NaN baseline gives inf or NaN: the ratio is then refused.
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(candidate) / np.float64(baseline))


def ratio_rows(
    records: Mapping[str, Sequence[RequestRecords]],
    candidate: str,
    metrics: Sequence[Metric] = HEADLINE_METRICS,
    warm_up: float = STEADY_STATE_TRIM,
) -> dict[str, dict[str, Ratio]]:
    """For every baseline policy other than `candidate`: each metric's name -> candidate / baseline,
    from each policy's whole runs in seed order, over their steady windows (from `warm_up`)."""
    if candidate not in records:
        raise ValueError(f"no runs of candidate policy {candidate!r}")
    return {
        baseline: {
            metric.name: paired_ratio(records[candidate], runs, metric, warm_up=warm_up) for metric in metrics
        }
        for baseline, runs in records.items()
        if baseline != candidate
    }


# The starvation guarantee of a policy without an aging clock (docs/limits-and-guarantees.md): in every
# run, each class's longest wait for its first token is at most this multiple of its longest under the
# better stock priority on the same trace, plus the policy's decode hold where it has one (a hold adds
# at most its length to a request's wait, `scheduling.holding`; stock vLLM holds nothing), the margin
# stretched by the policy's light steps where it has them (`light_steps.wait_stretch`). One run's
# longest wait is one request's: the margin covers a request that the class order hands a busier step,
# not a trend.
STOCK_WAIT_MARGIN = 1.25
# The stock priorities, in the order the tables print them.
STOCK_PRIORITIES = tuple(p.value for p in Policy if p.is_stock_priority)


def longest_ttft_per_class(records: RequestRecords) -> dict[str, float]:
    """Per class label, the longest TTFT of the whole run (NaN for a class with no first token)."""
    longest = {}
    for level in range(records.num_levels):
        ttft = _finite_part(records.ttft[records.level == level])
        label = RequestClass.for_level(level, records.num_levels).label
        longest[label] = float(ttft.max()) if ttft.size else float("nan")
    return longest


@dataclass(frozen=True)
class WaitCheck:
    """One run's longest wait of one class under a policy against the better stock priority's, with
    the policy's decode hold (`hold_s`) allowed once and its light steps' stretch (`stretch`,
    `light_steps.wait_stretch`) applied to the margin."""

    run: int
    label: str
    policy_s: float
    stock_s: float
    hold_s: float = 0.0
    stretch: float = 1.0

    @property
    def bound_s(self) -> float:
        return STOCK_WAIT_MARGIN * self.stretch * self.stock_s + self.hold_s

    @property
    def holds(self) -> bool:
        return not self.policy_s > self.bound_s


def wait_checks(
    candidate: Sequence[RequestRecords],
    stock: Mapping[str, Sequence[RequestRecords]],
    hold_s: float = 0.0,
    stretch: float = 1.0,
) -> list[WaitCheck]:
    """The guarantee per run (paired by index: the same trace) and class that got a first token under
    the candidate, against the shortest longest wait of the `stock` policies' runs (infinite where
    none of them gave that class a first token), the candidate's decode hold `hold_s` allowed once and
    the margin of the heavier classes stretched by its light steps' `stretch`."""
    checks = []
    for run, records in enumerate(candidate):
        mine = longest_ttft_per_class(records)
        theirs = [longest_ttft_per_class(runs[run]) for runs in stock.values()]
        for label, policy_s in mine.items():
            if math.isfinite(policy_s):
                stock_s = min((t[label] for t in theirs if math.isfinite(t[label])), default=math.inf)
                heavier = label != RequestClass.SAND.label  # light steps never slow sand
                checks.append(WaitCheck(run, label, policy_s, stock_s, hold_s, stretch if heavier else 1.0))
    return checks
