"""Paired comparison of serving policies: a candidate's metric over a baseline's, with a 95% interval.

Every policy replays the same trace for seed i, so a policy's evidence is one `RequestRecords` per
seed, in seed order, and row j of seed i is the same request (the same content, sent at the same
moment) under every policy. A hierarchical paired bootstrap resamples seeds, then within each drawn
seed its requests, drawing the same seeds and the same requests for both policies: that is the
pairing. It cancels the scatter both policies share, from trace to trace (a seed with more videos is
slower under both) and from request to request (a resample holding more long prompts has a higher
text P90 under both), and keeps what differs between the policies' runs of the same requests. A claim
such as "0.6x the baseline's text P90 TTFT" holds only if the interval's high end does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rps_serve.metrics import RequestRecords, concatenate_records
from rps_serve.requests import Modality
from rps_serve.workload.shapes import RequestKind

_SHORT_TEXT = list(RequestKind).index(RequestKind.SHORT_TEXT)


@dataclass(frozen=True)
class Metric:
    """A named number of a run's (or of pooled runs') records; NaN when there is nothing to measure."""

    name: str
    of: Callable[[RequestRecords], float]


def _finite_part(values: np.ndarray) -> np.ndarray:
    # NaN marks a request that did not get that far: it has no value to count. Dropping NaNs here
    # rather than calling np.nanpercentile / np.nanmean gives the same numbers, never warns on an
    # empty or all-NaN slice, and is faster in the bootstrap's inner loop.
    return values[~np.isnan(values)]


def _percentile(values: np.ndarray, q: float) -> float:
    """np.percentile's default (linear interpolation between the closest ranks), on a partial sort:
    np.percentile's own overhead was half the bootstrap's time."""
    kept = _finite_part(values)
    if not kept.size:
        return math.nan
    rank = (kept.size - 1) * q / 100
    below = math.floor(rank)
    above = min(below + 1, kept.size - 1)
    part = np.partition(kept, (below, above))
    return float(part[below] + (rank - below) * (part[above] - part[below]))


def _mean(values: np.ndarray) -> float:
    kept = _finite_part(values)
    return float(kept.mean()) if kept.size else math.nan


def _ttft_of(records: RequestRecords, modality: Modality) -> np.ndarray:
    return records.ttft[records.modality == modality.index]


def text_p90_ttft(records: RequestRecords) -> float:
    return _percentile(_ttft_of(records, Modality.TEXT), 90)


def short_text_p90_ttft(records: RequestRecords) -> float:
    """P90 TTFT of the short texts (the workload's kind, not a class): the requests a long prefill
    ahead of them delays most; NaN where the records do not say the kind."""
    if records.kind is None:
        return math.nan
    return _percentile(records.ttft[records.kind == _SHORT_TEXT], 90)


def text_mean_ttft(records: RequestRecords) -> float:
    return _mean(_ttft_of(records, Modality.TEXT))


def video_mean_ttft(records: RequestRecords) -> float:
    return _mean(_ttft_of(records, Modality.VIDEO))


def video_p99_ttft(records: RequestRecords) -> float:
    return _percentile(_ttft_of(records, Modality.VIDEO), 99)


def tpot_mean(records: RequestRecords) -> float:
    return _mean(records.tpot)


HEADLINE_METRICS: tuple[Metric, ...] = (
    Metric("text P90 TTFT", text_p90_ttft),
    Metric("short-text P90 TTFT", short_text_p90_ttft),
    Metric("text mean TTFT", text_mean_ttft),
    Metric("video mean TTFT", video_mean_ttft),
    Metric("video P99 TTFT", video_p99_ttft),
    Metric("TPOT mean", tpot_mean),
)


def steady(runs: Sequence[RequestRecords]) -> list[RequestRecords]:
    """Each run restricted to its steady-state window (no ramp-up, no drain)."""
    return [run.select(run.steady_state()) for run in runs]


@dataclass(frozen=True)
class Ratio:
    """Candidate's metric over the baseline's: the pooled estimate and a bootstrap interval.

    `low` and `high` are NaN when no resample gave a finite ratio.
    """

    estimate: float
    low: float
    high: float
    seeds: int
    requests: int  # candidate requests pooled over the seeds
    per_seed: tuple[float, ...] = ()  # the ratio of each seed's runs alone, in seed order

    def differs(self) -> bool:
        """Whether the interval excludes 1."""
        return self.high < 1 or self.low > 1

    def meets(self, target: float) -> bool:
        """Whether the ratio is at most `target`: a target holds only if its interval does."""
        return self.high <= target

    def verdict(self) -> str:
        if self.high < 1:
            return "faster"
        if self.low > 1:
            return "slower"
        return "no difference measured"

    def __str__(self) -> str:
        return f"{self.estimate:.2f}x [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class _Pool:
    """A policy's runs as one set of records, with where each seed's rows start and how many it has."""

    records: RequestRecords
    offsets: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, runs: Sequence[RequestRecords]) -> _Pool:
        sizes = np.array([len(run.arrival_s) for run in runs], dtype=np.intp)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.intp)
        return cls(concatenate_records(runs), offsets, sizes)

    def draw(self, rng: np.random.Generator, seeds: np.ndarray) -> np.ndarray:
        """Row indices of one resample: for every drawn seed, as many of its rows as it has, with
        replacement. A seed drawn twice contributes twice; a seed with no rows contributes none. Pools
        of the same seeds' sizes index the same requests with the same draw."""
        counts = self.sizes[seeds]
        starts = np.repeat(self.offsets[seeds], counts)
        spans = np.repeat(counts, counts)
        # One vectorized draw for all seeds: an offset in [0, n) for each row of a seed of n rows
        # (scaled uniforms are cheaper than integers() with per-row bounds; the minimum guards
        # against u * n rounding up to n).
        offsets = (rng.random(spans.size) * spans).astype(np.intp)
        return starts + np.minimum(offsets, spans - 1)


def _ratio(candidate: float, baseline: float) -> float:
    # A zero or NaN baseline gives inf or NaN; the interval keeps only finite ratios.
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(candidate) / np.float64(baseline))


def paired_ratio(
    candidate: Sequence[RequestRecords],
    baseline: Sequence[RequestRecords],
    metric: Metric,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Ratio:
    """`metric` of the pooled candidate runs over that of the pooled baseline runs, with a
    hierarchical paired bootstrap percentile interval.

    `candidate[i]` and `baseline[i]` are the two policies' runs of seed i's trace, row j of each the
    same request. Each resample draws seeds with replacement, then each drawn seed's requests with
    replacement, the same seeds and requests for both policies, pools them per policy and takes the
    ratio.
    """
    if len(candidate) != len(baseline):
        raise ValueError(f"candidate has {len(candidate)} runs and baseline {len(baseline)}: not paired")
    if not candidate:
        raise ValueError("no runs to compare")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")

    cand, base = _Pool.of(candidate), _Pool.of(baseline)
    if not np.array_equal(cand.sizes, base.sizes):
        raise ValueError(
            f"requests per seed differ (candidate {cand.sizes.tolist()}, baseline {base.sizes.tolist()}): "
            "not the same traces"
        )
    estimate = _ratio(metric.of(cand.records), metric.of(base.records))

    rng = np.random.Generator(np.random.PCG64(seed))
    n = len(candidate)
    ratios = np.empty(resamples)
    for b in range(resamples):
        rows = cand.draw(rng, rng.integers(0, n, size=n))
        ratios[b] = _ratio(metric.of(cand.records.select(rows)), metric.of(base.records.select(rows)))
    finite = ratios[np.isfinite(ratios)]
    if finite.size:
        tail = 100 * (1 - confidence) / 2
        low, high = (float(v) for v in np.percentile(finite, [tail, 100 - tail]))
    else:
        low = high = math.nan
    per_seed = tuple(_ratio(metric.of(c), metric.of(b)) for c, b in zip(candidate, baseline, strict=True))
    return Ratio(estimate, low, high, seeds=n, requests=int(cand.sizes.sum()), per_seed=per_seed)


def ratio_rows(
    records: Mapping[str, Sequence[RequestRecords]],
    candidate: str,
    metrics: Sequence[Metric] = HEADLINE_METRICS,
) -> dict[str, dict[str, Ratio]]:
    """For every baseline policy other than `candidate`: each metric's name -> candidate / baseline."""
    if candidate not in records:
        raise ValueError(f"no runs of candidate policy {candidate!r}")
    return {
        baseline: {metric.name: paired_ratio(records[candidate], runs, metric) for metric in metrics}
        for baseline, runs in records.items()
        if baseline != candidate
    }
