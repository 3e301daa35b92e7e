"""RPS against the baselines a vLLM user would configure instead, on simulated H100s: FCFS, stock vLLM
priority over our classes (`vllm-priority`) and stock priority by modality (`modality-priority`).

Run: `python benchmarks/h100_comparison.py [NAME ...] [--requests N] [--out DIR]` with NAME a setting
(default: every one), or `--why NAME [--gpus 4] [--policies A,B]` for where the time goes under
modality-priority, RPS and RPS without its evictions for waiting requests (`rps-no-evict`), or under
the policies named (the shipped one: `headroom-light`, as the simulator names `headroom` with light
steps).

Deployments: LLaVA-OneVision-7B on 1 GPU and -72B on 4 (the published reference fits), set up as the
paper served (serving shapes, eager). Workloads: mixes i-v and cost-vs-modality at 0.9x of the
simulated capacity, mixed-iii at 1.3x (sustained overload for the whole arrival window, then the
drain) and under KV pressure (a cache of `KV_PRESSURE_TOKENS`, at 0.9x of the capacity with that
cache). The capacity is the demo's: the highest Poisson rate at which FCFS's backlog stays bounded
(`loadtest.capacity.search_open_loop_capacity`), probed on seed 0's trace. The method is the real
comparisons' (`rps_harness.comparison`): `SEEDS`, fixed here before any run, give paired traces; each
ratio is the geometric mean of the per-seed ratios over the steady window with a Student-t interval
on their logarithms; every run is reported, none is dropped.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from experiments import LARGE, SMALL
from rps_harness.client import Tally
from rps_harness.comparison import HEADLINE_METRICS, Metric, Ratio, paired_ratio
from rps_harness.loadtest.capacity import OpenLoopCapacity, search_open_loop_capacity
from rps_harness.loadtest.replay import Replayed
from rps_harness.metrics import RequestRecords
from rps_harness.sim.breakdown import ttft_parts
from rps_harness.sim.engine import StepRecord
from rps_harness.sim.hardware import Execution
from rps_harness.sim.run import SimulationConfig, SimulationSetup, prepare, run_policy
from rps_harness.workload.shapes import SERVING
from rps_harness.workload.source import SyntheticWorkload
from rps_serve.requests import RequestClass

SEEDS = (0, 1, 2, 3, 4)
BASELINES = ("fcfs", "vllm-priority", "modality-priority")
CANDIDATE = "rps"
# What `--why` compares unless told: stock priority by modality, RPS, and RPS without its evictions.
WHY_POLICIES = ("modality-priority", CANDIDATE, "rps-no-evict")
LOAD, OVERLOAD = 0.9, 1.3
# A few 32-frame videos (6,873 KV tokens each with their answers) fill it.
KV_PRESSURE_TOKENS = 32_768
CAPACITY_PROBES = 7
# The first capacity probe: 7B on one GPU sustains about 10 req/s of mixed-iii (eager, serving
# shapes; `paper_figures.py norm-latency`), the 72B on four about a fifth of it.
CAPACITY_GUESS = {SMALL: 10.0, LARGE: 2.0}
# With the KV-pressure cache both sustain about half of it: the search starts there, so that its low
# end (half the first probe) lies below the capacity.
KV_PRESSURE_GUESS = 0.4
# The claim rows judge these; the printed table holds more.
VERDICT = ("normalized latency mean", "text P90 TTFT")
SHOWN = ("normalized latency mean", "text P90 TTFT", "sand P90 TTFT", "video mean TTFT", "TPOT mean")
DEPLOYMENTS = ((SMALL, 1), (LARGE, 4))


@dataclass(frozen=True)
class Setting:
    """A workload: `mix` at `load` x the capacity measured with the KV cache `kv_capacity_tokens`."""

    name: str
    mix: str
    load: float
    kv_capacity_tokens: int | None = None

    def describe(self, capacity: float) -> str:
        cache = "" if self.kv_capacity_tokens is None else f", KV cache {self.kv_capacity_tokens:,} tokens"
        return f"{self.mix} at {self.load:g}x of {capacity:.2f} req/s{cache}"


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        *(Setting(mix, mix, LOAD) for mix in ("mixed-i", "mixed-ii", "mixed-iii", "mixed-iv", "mixed-v")),
        Setting("cost-vs-modality", "cost-vs-modality", LOAD),
        Setting("overload", "mixed-iii", OVERLOAD),
        Setting("kv-pressure", "mixed-iii", LOAD, KV_PRESSURE_TOKENS),
    )
}


def _model(reference: str, gpus: int) -> str:
    return f"{'72B' if reference == LARGE else '7B'}, {gpus} GPU{'s' if gpus > 1 else ''}"


@dataclass(frozen=True)
class Compared:
    """One setting on one deployment: its capacity, and RPS over each baseline on every metric."""

    reference: str
    gpus: int
    setting: Setting
    capacity: OpenLoopCapacity
    ratios: dict[str, dict[str, Ratio]]
    preemptions: dict[str, list[int]]

    @property
    def label(self) -> str:
        """The deployment and the setting; a capacity the probes did not bracket says so."""
        unsure = "" if self.capacity.bracketed else " (capacity not bracketed by the probes)"
        return f"{_model(self.reference, self.gpus)}, {self.setting.describe(self.capacity.rate)}{unsure}"

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "gpus": self.gpus,
            "setting": self.setting.name,
            "capacity": {"rate": self.capacity.rate, "probes": [vars(p) for p in self.capacity.probes]},
            "ratios": {b: {m: r.to_json() for m, r in row.items()} for b, row in self.ratios.items()},
            "preemptions": self.preemptions,
        }


class Comparison:
    def __init__(self, requests: int, out: Path) -> None:
        self.requests, self.out = requests, out
        out.mkdir(parents=True, exist_ok=True)
        self._capacities: dict[tuple[str, int, str, int | None], OpenLoopCapacity] = {}

    def config(self, reference: str, gpus: int, setting: Setting, rate: float, seed: int) -> SimulationConfig:
        workload = SyntheticWorkload(setting.mix, rate, self.requests, seed, shapes=SERVING)
        return SimulationConfig(
            reference,
            gpus,
            workload,
            seed,
            execution=Execution.EAGER,
            kv_capacity_tokens=setting.kv_capacity_tokens,
        )

    def capacity(self, reference: str, gpus: int, setting: Setting) -> OpenLoopCapacity:
        """The highest rate of `setting`'s mix and cache at which FCFS's backlog stays bounded."""
        key = (reference, gpus, setting.mix, setting.kv_capacity_tokens)
        if key not in self._capacities:
            unit = replace(setting, load=1.0)

            def probe(rate: float) -> Replayed:
                records = run_policy(
                    prepare(self.config(reference, gpus, unit, rate, SEEDS[0])), "fcfs"
                ).records
                done = int(records.completed.sum())
                return Replayed(records, Tally(len(records.arrival_s), done, 0, 0, 0), [])

            guess = CAPACITY_GUESS[reference] * (
                1.0 if setting.kv_capacity_tokens is None else KV_PRESSURE_GUESS
            )
            self._capacities[key] = search_open_loop_capacity(probe, guess, CAPACITY_PROBES)
        return self._capacities[key]

    def runs(
        self, reference: str, gpus: int, setting: Setting, policies: Sequence[str]
    ) -> tuple[dict[str, list[RequestRecords]], dict[str, list[int]]]:
        """Every policy on every seed's trace at the setting's rate, seed by seed: each policy's
        records and preemptions, in seed order."""
        rate = setting.load * self.capacity(reference, gpus, setting).rate
        runs: dict[str, list[RequestRecords]] = {p: [] for p in policies}
        preemptions: dict[str, list[int]] = {p: [] for p in policies}
        for seed in SEEDS:
            setup = prepare(self.config(reference, gpus, setting, rate, seed))
            for policy in policies:
                outcome = run_policy(setup, policy)
                runs[policy].append(outcome.records)
                preemptions[policy].append(outcome.preemptions)
        return runs, preemptions

    def compare(self, reference: str, gpus: int, setting: Setting) -> Compared:
        """Every policy on every seed's trace at the setting's rate; RPS over each baseline."""
        capacity = self.capacity(reference, gpus, setting)
        runs, preemptions = self.runs(reference, gpus, setting, (*BASELINES, CANDIDATE))
        ratios = {
            baseline: {m.name: paired_ratio(runs[CANDIDATE], runs[baseline], m) for m in _metrics()}
            for baseline in BASELINES
        }
        return Compared(reference, gpus, setting, capacity, ratios, preemptions)

    def run(self, names: Sequence[str]) -> list[Compared]:
        """Every named setting on both deployments: the table, and the JSON in `out`."""
        compared = [self.compare(r, g, SETTINGS[name]) for r, g in DEPLOYMENTS for name in names]
        print(
            f"RPS over each baseline, {len(SEEDS)} seeds ({', '.join(map(str, SEEDS))}), {self.requests}"
            " requests a run, steady state; `=`: the interval includes 1.\n"
        )
        print("| setting | baseline | " + " | ".join(SHOWN) + " |\n|---|---|" + "---|" * len(SHOWN))
        for c in compared:
            for baseline, row in c.ratios.items():
                print(f"| {c.label} | {baseline} | " + " | ".join(row[m].marked() for m in SHOWN) + " |")
        print("\nCapacities (FCFS's backlog bounded), probes in order:\n")
        for c in compared:
            print(f"- {_model(c.reference, c.gpus)}, {c.setting.name}: {c.capacity.describe()}")
        (self.out / "h100_comparison.json").write_text(
            json.dumps([c.to_json() for c in compared], indent=1) + "\n"
        )
        return compared

    def why(self, reference: str, gpus: int, setting: Setting, policies: Sequence[str]) -> None:
        """Seed 0 of `setting`: per class, TTFT split by stage; per policy, what its steps did and what
        its normalized latency is made of."""
        rate = setting.load * self.capacity(reference, gpus, setting).rate
        setup = prepare(self.config(reference, gpus, setting, rate, SEEDS[0]))
        where = f"{_model(reference, gpus)}, {setting.describe(rate / setting.load)}"
        print(f"{where}, seed {SEEDS[0]}, steady state\n")
        print(
            "| policy | class | requests | text/image/video | TTFT mean | front end | step in progress"
            " | queued steps | final step |\n|---|---|---:|---|---:|---:|---:|---:|---:|"
        )
        steps_of: dict[str, list[StepRecord]] = {}
        records_of: dict[str, RequestRecords] = {}
        for policy in policies:
            steps: list[StepRecord] = []
            outcome = run_policy(setup, policy, steps.append)
            steps_of[policy], records_of[policy] = steps, outcome.records
            _class_rows(policy, setup, outcome.records, outcome.ready_s, steps)
        print(
            "\n| policy | steps | mean step (ms) | prefill tokens a step | decodes a step | preemptions"
            " | normalized latency | its first-token part | TPOT |\n|---|" + "---:|" * 8
        )
        for policy, steps in steps_of.items():
            mean_s = np.mean([s.duration_s for s in steps])
            prefill, decodes = np.mean([s.prefill_tokens for s in steps]), np.mean([s.decodes for s in steps])
            norm, first_token_part, tpot = _normalized_latency_parts(records_of[policy])
            print(
                f"| {policy} | {len(steps)} | {1e3 * mean_s:.1f} | {prefill:.0f} | {decodes:.1f}"
                f" | {sum(s.preemptions for s in steps)} | {norm:.4f} | {first_token_part:.0%} | {tpot:.4f} |"
            )


def _normalized_latency_parts(records: RequestRecords) -> tuple[float, float, float]:
    """Over the steady window's finished requests: the mean normalized latency, the share of it that
    is the wait for the first token (TTFT over output tokens), and the mean TPOT. Where the first
    token's part is small, the decode steps' length sets normalized latency, not the order of prefills."""
    done = records.steady_state() & records.completed
    norm = float(np.mean(records.norm_latency[done]))
    first_token = float(np.mean(records.ttft[done] / np.maximum(records.output_tokens[done], 1)))
    return norm, first_token / norm, float(np.nanmean(records.tpot[done]))


def _class_rows(
    policy: str, setup: SimulationSetup, records: RequestRecords, ready_s: np.ndarray, steps: list[StepRecord]
) -> None:
    """Steady-state TTFT of each cost class (the cost model's, whatever the policy orders by), by stage."""
    parts = ttft_parts(records.arrival_s, ready_s, records.first_token_s, steps)
    steady = records.steady_state()
    for level in range(setup.num_levels):
        mine = steady & (setup.levels == level)
        modalities = np.bincount(setup.trace.modality[mine], minlength=3)
        cells = [
            float(np.mean(x[mine]))
            for x in (
                records.ttft,
                parts.preprocess_s,
                parts.in_progress_s,
                parts.queued_s,
                parts.final_step_s,
            )
        ]
        name, mix = RequestClass(level).label, "/".join(map(str, modalities))
        print(
            f"| {policy} | {name} | {int(mine.sum())} | {mix} | "
            + " | ".join(f"{c:.2f}" for c in cells)
            + " |"
        )


def _metrics() -> tuple[Metric, ...]:
    return tuple(m for m in HEADLINE_METRICS if m.name in (*SHOWN, *VERDICT))


def claim_rows(compared: Sequence[Compared]) -> list[tuple[str, str, str, str, str]]:
    """Rows of the claim table: per deployment, setting and baseline, RPS's ratios and the verdict."""
    claims = {
        "fcfs": "lower latency than vLLM FCFS",
        "vllm-priority": "lower latency than stock vLLM priority over the same classes",
        "modality-priority": "lower latency than stock vLLM priority by modality",
    }
    rows = []
    for c in compared:
        for baseline, row in c.ratios.items():
            ours = "; ".join(f"{m} {row[m].marked()}" for m in SHOWN)
            rows.append(
                (
                    f"{claims[baseline]} (a user's baseline, not the paper's)"
                    if baseline != "fcfs"
                    else claims[baseline],
                    f"RPS/{baseline}: {ours}",
                    f"{c.label}, {len(SEEDS)} seeds",
                    f"{' and '.join(VERDICT)}: the 95% interval below 1",
                    _verdict({m: row[m] for m in VERDICT}),
                )
            )
    return rows


def _verdict(ratios: dict[str, Ratio]) -> str:
    """ "holds" where every judged ratio's interval lies below 1; else what stopped it."""
    if any(not r.measured for r in ratios.values()):
        return "not measured"
    if all(r.high < 1 for r in ratios.values()):
        return "holds"
    slower = [name for name, r in ratios.items() if r.low > 1]
    if slower:
        return f"does not hold (RPS slower: {', '.join(slower)})"
    tied = [name for name, r in ratios.items() if not r.differs()]
    return f"does not hold (no difference measured: {', '.join(tied)})"


def check_settings(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    """Exit with the parser's usage where a name is not one of `SETTINGS`."""
    unknown = set(names) - set(SETTINGS)
    if unknown:
        parser.error(f"unknown settings {', '.join(sorted(unknown))}; expected {', '.join(SETTINGS)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"settings: {', '.join(SETTINGS)}")
    parser.add_argument("--why", choices=list(SETTINGS), help="where the time goes in this setting")
    parser.add_argument("--gpus", type=int, choices=(1, 4), default=1, help="with --why: 7B on 1, 72B on 4")
    parser.add_argument(
        "--policies",
        type=lambda text: text.split(","),
        default=list(WHY_POLICIES),
        help=f"with --why: the policies compared, comma-separated (default {','.join(WHY_POLICIES)})",
    )
    parser.add_argument("--requests", type=int, default=3500)
    parser.add_argument("--out", type=Path, default=Path("out/h100-comparison"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    check_settings(parser, args.names)
    comparison = Comparison(args.requests, args.out)
    if args.why:
        reference = SMALL if args.gpus == 1 else LARGE
        comparison.why(reference, args.gpus, SETTINGS[args.why], args.policies)
        return
    comparison.run(args.names or list(SETTINGS))


if __name__ == "__main__":
    main()
