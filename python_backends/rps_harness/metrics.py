"""Latency metrics from per-request records, engine-neutral: the simulator and the load client share them.

`M = {"ttft", "tpot", "e2e", "norm_latency"}` of `S = {"mean", "p50", "p90", "p95", "p99"}` in seconds;
groups by modality and by class; goodput and SLO violations at SLO scales.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rps_serve.requests import Modality, RequestClass

PERCENTILES = (50, 90, 95, 99)
SLO_SCALES = (1.0, 2.0, 3.0, 4.0)
STEADY_STATE_TRIM = 0.1  # the share of a run's arrivals its steady window leaves out at each end

# `RequestRecords`' columns every record has, with the type `RequestRecords.from_json` reads each as.
_COLUMN_TYPES: dict[str, type] = {
    "arrival_s": float,
    "first_token_s": float,
    "finish_s": float,
    "output_tokens": int,
    "modality": int,
    "level": int,
}

Summary = dict[str, float | None]
Metrics = dict[str, Any]


@dataclass(frozen=True)
class RequestRecords:
    """One row per request: times in seconds on one clock, NaN where a request did not get that far.

    `modality` holds `Modality.index`; `level` the class level out of `num_levels`; `kind`, where the
    trace says it, the workload's request kind (`workload.shapes.RequestKind`, in its order: short text,
    long text, image, video).
    """

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray
    modality: np.ndarray
    level: np.ndarray
    num_levels: int = 3
    kind: np.ndarray | None = None

    @property
    def ttft(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s

    @property
    def e2e(self) -> np.ndarray:
        return self.finish_s - self.arrival_s

    @property
    def tpot(self) -> np.ndarray:
        """Seconds per output token after the first; NaN for single-token answers."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                self.output_tokens > 1,
                (self.finish_s - self.first_token_s) / (self.output_tokens - 1),
                np.nan,
            )

    @property
    def norm_latency(self) -> np.ndarray:
        """End-to-end seconds per output token."""
        return self.e2e / np.maximum(self.output_tokens, 1)

    @property
    def completed(self) -> np.ndarray:
        return ~np.isnan(self.finish_s)

    @property
    def makespan_s(self) -> float:
        """From the first arrival to the last finish; 0 when no request completed."""
        if not self.completed.any():
            return 0.0
        return float(np.nanmax(self.finish_s) - np.nanmin(self.arrival_s))

    def select(self, mask: np.ndarray) -> RequestRecords:
        """The rows `mask` selects."""
        return RequestRecords(
            arrival_s=self.arrival_s[mask],
            first_token_s=self.first_token_s[mask],
            finish_s=self.finish_s[mask],
            output_tokens=self.output_tokens[mask],
            modality=self.modality[mask],
            level=self.level[mask],
            num_levels=self.num_levels,
            kind=None if self.kind is None else self.kind[mask],
        )

    def to_json(self) -> dict[str, Any]:
        """Every column as a list (NaN where a request did not get that far), for `from_json`."""
        return {
            **{name: getattr(self, name).tolist() for name in _COLUMN_TYPES},
            "kind": None if self.kind is None else self.kind.tolist(),
            "num_levels": self.num_levels,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestRecords:
        return cls(
            **{name: np.asarray(data[name], dtype=dtype) for name, dtype in _COLUMN_TYPES.items()},
            num_levels=int(data["num_levels"]),
            kind=None if data["kind"] is None else np.asarray(data["kind"], dtype=int),
        )

    def steady_state(self, trim: float = STEADY_STATE_TRIM, warm_up: float | None = None) -> np.ndarray:
        """Mask of the requests that arrived after the first `warm_up` (`trim` where None) and before
        the last `trim` of the arrivals: without the ramp-up (an engine that starts empty, a queue that
        has yet to form) and the drain (nothing arrives behind the last requests), whose latencies an
        open-loop run of finite length distorts."""
        n = len(self.arrival_s)
        if n == 0:
            return np.zeros(0, dtype=bool)
        first = trim if warm_up is None else warm_up
        if not 0 <= first < 1 - trim:
            raise ValueError(f"a warm-up of {first:g} leaves no window before the last {trim:g}")
        order = np.sort(self.arrival_s)
        start, end = order[round(first * (n - 1))], order[round((1 - trim) * (n - 1))]
        return (self.arrival_s >= start) & (self.arrival_s <= end)

    def class_names(self) -> np.ndarray:
        """`RequestClass` label of every request (middle levels of k > 3 count as pebbles)."""
        labels = [RequestClass.for_level(level, self.num_levels).label for level in range(self.num_levels)]
        return np.array(labels)[self.level]


def concatenate_records(runs: Sequence[RequestRecords]) -> RequestRecords:
    """The rows of several runs as one (each run keeps its own clock)."""
    return RequestRecords(
        arrival_s=np.concatenate([r.arrival_s for r in runs]),
        first_token_s=np.concatenate([r.first_token_s for r in runs]),
        finish_s=np.concatenate([r.finish_s for r in runs]),
        output_tokens=np.concatenate([r.output_tokens for r in runs]),
        modality=np.concatenate([r.modality for r in runs]),
        level=np.concatenate([r.level for r in runs]),
        num_levels=runs[0].num_levels,
        kind=None if any(r.kind is None for r in runs) else np.concatenate([r.kind for r in runs]),
    )


def summary(values: np.ndarray) -> Summary:
    """Mean and percentiles of the finite values; None throughout when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"mean": None, **{f"p{q}": None for q in PERCENTILES}}
    quantiles = np.percentile(finite, PERCENTILES)
    return {
        "mean": float(finite.mean()),
        **{f"p{q}": float(v) for q, v in zip(PERCENTILES, quantiles, strict=True)},
    }


def latency_metrics(records: RequestRecords, mask: np.ndarray | None = None) -> Metrics:
    """M for the requests selected by `mask` (all when None), plus their count."""
    select = np.ones(len(records.arrival_s), dtype=bool) if mask is None else mask
    return {
        "ttft": summary(records.ttft[select]),
        "tpot": summary(records.tpot[select]),
        "e2e": summary(records.e2e[select]),
        "norm_latency": summary(records.norm_latency[select]),
        "count": int(select.sum()),
    }


def grouped_metrics(records: RequestRecords) -> dict[str, Any]:
    """overall, by_modality and by_class M."""
    names = records.class_names()
    return {
        "overall": latency_metrics(records),
        "by_modality": {m.value: latency_metrics(records, records.modality == m.index) for m in Modality},
        "by_class": {c.label: latency_metrics(records, names == c.label) for c in RequestClass},
    }


def slo_metrics(
    records: RequestRecords,
    ttft_slo_s: Mapping[Modality, float],
    duration_s: float,
    scales: Sequence[float] = SLO_SCALES,
) -> dict[str, Any]:
    """Goodput and TTFT-SLO violations with each modality's SLO scaled by every factor in `scales`.

    A request meets its SLO when it completes with TTFT <= scale * SLO of its modality.
    goodput = requests meeting the SLO per second of `duration_s`; violation_rate = share of
    requests that miss it; severity = mean TTFT / SLO - 1 over the violators (0.5: half again late).
    """
    base = np.array([ttft_slo_s[m] for m in Modality])[records.modality]
    ttft = records.ttft
    report: dict[str, Any] = {"ttft_slo_s": {m.value: float(ttft_slo_s[m]) for m in Modality}}
    for scale in scales:
        slo = scale * base
        with np.errstate(invalid="ignore"):
            late = ~(records.completed & (ttft <= slo))
        overshoot = ttft[late] / slo[late] - 1
        overshoot = overshoot[np.isfinite(overshoot)]
        report[f"{scale:g}x"] = {
            "goodput_rps": float((~late).sum() / duration_s) if duration_s > 0 else 0.0,
            "violation_rate": float(late.mean()) if late.size else 0.0,
            "severity": float(overshoot.mean()) if overshoot.size else 0.0,
            "by_modality": {
                m.value: float(late[records.modality == m.index].mean())
                if np.any(records.modality == m.index)
                else None
                for m in Modality
            },
        }
    return report


def policy_table(report: dict[str, Any]) -> str:
    """One row per policy of a report in `rps-serve simulate`'s JSON shape (simulate, ab): TTFT by
    modality, normalized latency, and utilization and preemptions where the report has them."""
    lines = [
        f"{'policy':<14} {'text p90':>9} {'text p99':>9} {'text mean':>9} {'image mean':>10}"
        f" {'video mean':>10} {'norm mean':>9} {'util':>5} {'done':>6} {'preempt':>7}"
    ]
    for policy, result in report["results"].items():
        ttft = {m: result["by_modality"][m]["ttft"] for m in ("text", "image", "video")}
        cells = [
            ttft["text"]["p90"],
            ttft["text"]["p99"],
            ttft["text"]["mean"],
            ttft["image"]["mean"],
            ttft["video"]["mean"],
        ]
        shown = " ".join(
            f"{'-' if v is None else f'{v:.3f}':>{w}}" for v, w in zip(cells, (9, 9, 9, 10, 10), strict=True)
        )
        # A real engine reports no utilization or preemption count here (they live in the engine core).
        utilization = f"{result['utilization']:5.2f}" if "utilization" in result else f"{'-':>5}"
        preemptions = f"{result['preemptions']:7d}" if "preemptions" in result else f"{'-':>7}"
        lines.append(
            f"{policy:<14} {shown} {result['overall']['norm_latency']['mean']:9.4f}"
            f" {utilization} {result['completed']:6d} {preemptions}"
        )
    lines.append("TTFT and normalized latency (s per output token) in seconds")
    return "\n".join(lines)
