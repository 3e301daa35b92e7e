"""The demo's records, which `demo` writes and `demo_report` reads: each run (and the machine's speed
in it), every policy's runs at one load, the whole demo."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

from rps_harness.client import Tally
from rps_harness.comparison import HEADLINE_METRICS, Ratio, ratio_rows, steady
from rps_harness.loadtest.capacity import Capacity, OpenLoopCapacity
from rps_harness.loadtest.demo_analysis import candidate_of
from rps_harness.loadtest.load import BenchRun
from rps_harness.loadtest.placement import Placement
from rps_harness.loadtest.run_analysis import pooled
from rps_harness.loadtest.server_stats import ServedFit
from rps_harness.metrics import STEADY_STATE_TRIM, RequestRecords, concatenate_records


@dataclass(frozen=True)
class PolicyRun:
    """One run: the load client's measurement, the server's run log over its steady window, and the
    CPU each process used."""

    bench: BenchRun
    analysis: dict[str, Any]
    processes: list[dict[str, Any]]
    fit: ServedFit | None  # the online cost model at the run's end; None where it is off

    def summary(self, warm_up: float) -> dict[str, Any]:
        """The run's steady-state headline metrics (from `warm_up` of its arrivals), its engine summary
        and processes, to see how far runs of one policy scatter and why, and every request's record
        (`RequestRecords.from_json` reads them back, to compute any ratio again)."""
        (records,) = steady([self.bench.records], warm_up)
        return {
            **{m.name: m.of(records) for m in HEADLINE_METRICS},
            "records": self.bench.records.to_json(),
            "engine": self.analysis["engine"],
            "loop_lag_s": self.analysis["loop_lag_s"],
            "first_token_steps": self.analysis["first_token_steps"],
            "first_token_tail": self.analysis["first_token_tail"],
            "token_parts": self.analysis["token_parts"],
            "run_log": self.analysis["run_log"],
            "steady_window_monotonic_s": self.analysis["window"],
            "processes": self.processes,
            "served_fit": None if self.fit is None else self.fit.as_json(),
        }


def run_speed(run: PolicyRun) -> float:
    """The machine's speed in a run: its median step that decodes one request and nothing else
    (`run_analysis.engine_summary`), the same work under every policy; NaN where it had too few such
    steps to measure it (`run_analysis.MIN_LONE_DECODE_STEPS`)."""
    return float(run.analysis["engine"].get("lone_decode_step_ms", math.nan))


def speed_change(candidate: PolicyRun, baseline: PolicyRun) -> float:
    """How much slower (> 0) or faster (< 0) the candidate's run found the machine than the baseline's."""
    return run_speed(candidate) / run_speed(baseline) - 1


@dataclass
class LoadRuns:
    """Every policy's runs at one arrival rate (`fraction` of the open-loop capacity, if measured;
    `bracketed` False where the capacity is only a lower bound, or, with `above`, where every probe
    grew, down to the rate the fraction is of), in seed order; their steady windows start after the
    first `warm_up` of their arrivals."""

    rate: float
    fraction: float | None
    runs: dict[str, list[PolicyRun]] = field(default_factory=dict)
    bracketed: bool = True
    above: bool = False
    warm_up: float = STEADY_STATE_TRIM

    @property
    def candidate(self) -> str:
        """The policy judged against the others (`candidate_of`)."""
        return candidate_of(self.runs)

    @property
    def name(self) -> str:
        if self.fraction is None:
            return f"{self.rate:.2f} req/s"
        of = "" if self.bracketed else " of a lower bound on the capacity"
        if self.above:
            of = " of a rate above the capacity"
        return f"{self.rate:.2f} req/s ({self.fraction:g}x{of})"

    def steady_records(self) -> dict[str, list[RequestRecords]]:
        """Per policy, each seed's run cut to its steady window."""
        return {
            policy: steady([r.bench.records for r in runs], self.warm_up)
            for policy, runs in self.runs.items()
        }

    def pooled_records(self) -> dict[str, RequestRecords]:
        return {p: concatenate_records(runs) for p, runs in self.steady_records().items()}

    def tallies(self) -> dict[str, Tally]:
        return {p: Tally.total([r.bench.tally for r in runs]) for p, runs in self.runs.items()}

    def analysis(self) -> dict[str, dict[str, Any]]:
        return {p: pooled([r.analysis for r in runs]) for p, runs in self.runs.items()}

    @functools.cached_property
    def ratios(self) -> dict[str, dict[str, Ratio]]:
        """The candidate's paired ratios to each baseline over the whole runs (computed once: read it
        only when every run is in)."""
        records = {p: [r.bench.records for r in runs] for p, runs in self.runs.items()}
        if self.candidate not in records or len(records) < 2:
            return {}
        return ratio_rows(records, self.candidate, warm_up=self.warm_up)


@dataclass(frozen=True)
class DemoRuns:
    loads: list[LoadRuns]
    placement: Placement | None
    closed_loop: Capacity | None  # the measurements the rates came from, if measured
    open_loop: OpenLoopCapacity | None

    def tallies(self) -> list[Tally]:
        return [t for load in self.loads for t in load.tallies().values()]
