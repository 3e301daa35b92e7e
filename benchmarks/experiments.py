"""The paper's experiments on the simulator, one command each; prints Markdown tables, writes JSON.

Run: `python benchmarks/experiments.py NAME [--requests N] [--out DIR]` with NAME one of
done-when, ttft-breakdown, load, ablations, mixes, classes, baselines, goodput, starvation (or `all`).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rps_harness.plots import plot_latency_vs_load
from rps_harness.sim.breakdown import ttft_parts
from rps_harness.sim.engine import StepRecord
from rps_harness.sim.hardware import tp_speedup
from rps_harness.sim.run import SimulationConfig, prepare, run_policy, run_simulation
from rps_harness.sim.starvation import SustainedSand, run_sustained_sand
from rps_harness.workload.source import SyntheticWorkload
from rps_serve.profiles.reference import DEFAULT_REFERENCE
from rps_serve.scheduling.parameters import Policy

SMALL = DEFAULT_REFERENCE  # the paper's 7B
LARGE = "llava-onevision-qwen2-72b"
# The done-when operating point: FCFS text P99 TTFT is past 1 s here (1 GPU, mixed-iii).
RATE_1GPU = 14.0
SEEDS = (0, 1, 2, 3, 4)
Runner = TypeVar("Runner")
# Mean prompt + output tokens per request of each mix (shapes.py), to load every mix alike.
MIX_TOKENS = {"mixed-i": 1177, "mixed-ii": 1405, "mixed-iii": 1617, "mixed-iv": 1766, "mixed-v": 2005}


def _ttft(result: dict[str, Any], modality: str, stat: str) -> float:
    value = result["by_modality"][modality]["ttft"][stat]
    return float("nan") if value is None else float(value)


def _row(label: str, policy: str, result: dict[str, Any]) -> str:
    cells = [
        _ttft(result, "text", "p99"),
        _ttft(result, "text", "mean"),
        _ttft(result, "image", "mean"),
        _ttft(result, "video", "mean"),
        _ttft(result, "video", "p99"),
        result["overall"]["norm_latency"]["mean"],
        result["utilization"],
    ]
    numbers = " | ".join(f"{c:.3f}" for c in cells)
    return f"| {label} | {policy} | {numbers} | {result['completed']} | {result['preemptions']} |"


HEADER = (
    "| run | policy | text P99 TTFT | text mean | image mean | video mean | video P99 | norm. latency"
    " | util. | done | preempt. |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


class Experiments:
    def __init__(self, requests: int, out: Path) -> None:
        self.requests = requests
        self.out = out
        out.mkdir(parents=True, exist_ok=True)

    def _run(
        self,
        policies: Sequence[str],
        rate: float,
        mix: str = "mixed-iii",
        seed: int = 0,
        reference: str = SMALL,
        gpus: int = 1,
        classes: int = 3,
    ) -> dict[str, Any]:
        workload = SyntheticWorkload(mix, rate, self.requests, seed)
        report, _ = run_simulation(SimulationConfig(reference, gpus, workload, seed, classes), policies)
        return report

    def _table(self, name: str, runs: list[tuple[str, dict[str, Any]]]) -> None:
        print(HEADER)
        for label, report in runs:
            for policy, result in report["results"].items():
                print(_row(label, policy, result))
        (self.out / f"{name}.json").write_text(json.dumps([r for _, r in runs], indent=1) + "\n")

    def done_when(self) -> None:
        """FCFS vs RPS at the done-when point, five seeds, with the four criteria per seed."""
        runs = [(f"seed {s}", self._run(["fcfs", "rps"], rate=RATE_1GPU, seed=s)) for s in SEEDS]
        self._table("done_when", runs)
        print(
            "\n| seed | FCFS text P99 | RPS/FCFS text P99 | RPS/FCFS video mean | norm. RPS <= FCFS | done |"
        )
        print("|---|---:|---:|---:|---|---|")
        for label, report in runs:
            fcfs, rps = report["results"]["fcfs"], report["results"]["rps"]
            text = _ttft(rps, "text", "p99") / _ttft(fcfs, "text", "p99")
            video = _ttft(rps, "video", "mean") / _ttft(fcfs, "video", "mean")
            norm = rps["overall"]["norm_latency"]["mean"] <= fcfs["overall"]["norm_latency"]["mean"]
            done = fcfs["completed"] == rps["completed"] == self.requests
            print(
                f"| {label} | {_ttft(fcfs, 'text', 'p99'):.3f} | {text:.2f} | {video:.2f} | {norm} | {done} |"
            )

    def ttft_breakdown(self) -> None:
        """Where the slowest 2% of sand TTFTs go under FCFS and RPS, at the done-when point."""
        print(
            "| seed | policy | sand P98+ TTFT | preprocessing | rest of step in progress | queued steps"
            " | final step |\n|---|---|---:|---:|---:|---:|---:|"
        )
        for seed in SEEDS:
            config = SimulationConfig(
                SMALL, 1, SyntheticWorkload("mixed-iii", RATE_1GPU, self.requests, seed), seed
            )
            setup = prepare(config)
            for policy in ("fcfs", "rps"):
                steps: list[StepRecord] = []
                outcome = run_policy(setup, policy, steps.append)
                records = outcome.records
                sand = np.flatnonzero((records.level == 0) & records.completed)
                ttft = records.first_token_s[sand] - records.arrival_s[sand]
                slow = sand[ttft >= np.percentile(ttft, 98)]
                parts = ttft_parts(
                    records.arrival_s[slow], outcome.ready_s[slow], records.first_token_s[slow], steps
                )
                cells = [
                    float(np.mean(records.first_token_s[slow] - records.arrival_s[slow])),
                    *(float(np.mean(part)) for part in vars(parts).values()),
                ]
                print(f"| {seed} | {policy} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")

    def load(self) -> None:
        """Latency against load on 1, 2 and 4 GPUs (rates scaled by the tensor-parallel speed-up)."""
        for gpus in (1, 2, 4):
            policies = ["fcfs", "rps"] if gpus == 1 else ["fcfs", "rps", "modserve", "modserve-rps"]
            rates = [round(RATE_1GPU * tp_speedup(gpus) * f, 1) for f in (0.5, 0.7, 0.85, 0.95, 1.0)]
            runs = [(f"{gpus} GPU {rate} req/s", self._run(policies, gpus=gpus, rate=rate)) for rate in rates]
            print(f"\n{gpus} GPU(s)\n")
            self._table(f"load_{gpus}gpu", runs)
            series: dict[str, dict[str, list[float]]] = {}
            for metric, pick in (
                ("text P99 TTFT (s)", lambda r: _ttft(r, "text", "p99")),
                ("video mean TTFT (s)", lambda r: _ttft(r, "video", "mean")),
                ("mean normalized latency (s/token)", lambda r: r["overall"]["norm_latency"]["mean"]),
            ):
                series[metric] = {p: [pick(rep["results"][p]) for _, rep in runs] for p in policies}
            plot_latency_vs_load(rates, series, self.out / f"load_{gpus}gpu.png", f"{SMALL}, {gpus} GPU(s)")

    def ablations(self) -> None:
        """Naive classifier, static-only, aging-only, EDF and the prefill cap against RPS and FCFS."""
        policies = ["fcfs", "rps", "rps-naive", "static", "aging", "edf", "rps-cap"]
        self._table("ablations", [(f"{RATE_1GPU} req/s", self._run(policies, rate=RATE_1GPU))])

    def mixes(self) -> None:
        """Mixes i-v, each at the rate that puts the same tokens per second on the GPU as mixed-iii."""
        runs = []
        for mix, tokens in MIX_TOKENS.items():
            rate = round(RATE_1GPU * MIX_TOKENS["mixed-iii"] / tokens, 1)
            runs.append((f"{mix} {rate} req/s", self._run(["fcfs", "rps"], mix=mix, rate=rate)))
        self._table("mixes", runs)

    def classes(self) -> None:
        """k = 2...5 classes for RPS."""
        runs = []
        for k in (2, 3, 4, 5):
            policies = ["fcfs", "rps"] if k == 2 else ["rps"]
            runs.append((f"k={k}", self._run(policies, rate=RATE_1GPU, classes=k)))
        self._table("classes", runs)

    def baselines(self) -> None:
        """vLLM FCFS, ModServe, ModServe+RPS and RPS for LLaVA-OneVision-72B on 4 GPUs."""
        policies = ["fcfs", "modserve", "modserve-rps", "rps"]
        runs = []
        for rate in (2.0, 3.0, 4.0, 5.0):
            runs.append((f"72B 4 GPU {rate} req/s", self._run(policies, reference=LARGE, gpus=4, rate=rate)))
        self._table("baselines", runs)

    def goodput(self) -> None:
        """Goodput and TTFT-SLO violations at SLO scales 1-4x, 2 GPUs."""
        rate = round(RATE_1GPU * tp_speedup(2) * 0.95, 1)
        report = self._run(["fcfs", "rps", "modserve", "modserve-rps"], gpus=2, rate=rate)
        (self.out / "goodput.json").write_text(json.dumps(report, indent=1) + "\n")
        slo = {m: round(v, 3) for m, v in report["config"]["isolated_p99_ttft_s"].items()}
        print(f"2 GPUs, {rate} req/s; SLO at 1x = isolated P99 TTFT {slo}\n")
        print("| policy | scale | goodput (req/s) | violation rate | severity | text | image | video |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for policy, result in report["results"].items():
            for scale in ("1x", "2x", "3x", "4x"):
                s = result["slo"][scale]
                by = s["by_modality"]
                print(
                    f"| {policy} | {scale} | {s['goodput_rps']:.2f} | {s['violation_rate']:.3f} | "
                    f"{s['severity']:.2f} | {by['text']:.3f} | {by['image']:.3f} | {by['video']:.3f} |"
                )

    def starvation(self) -> None:
        """A rock behind steady sand that holds the KV cache: its wait against the derived bound."""
        scenario = SustainedSand()
        print(
            "| policy | rock TTFT | bound W(D) + drain + 2 steps | sand max TTFT (D) |\n|---|---:|---:|---:|"
        )
        for policy in Policy:
            outcome = run_sustained_sand(policy, scenario)
            print(
                f"| {policy.value} | {outcome.rock_ttft_s:.1f} s | {outcome.bound_s:.1f} s"
                f" | {outcome.sand_max_ttft_s:.2f} s |"
            )
        print(f"\nsand stops at {scenario.sand_until_s} s; the rock arrived at {scenario.rock_arrival_s} s")


def run_chosen(name: str, commands: Mapping[str, Callable[[Runner], None]], runner: Runner) -> None:
    """The command `name` names, or every one for "all", each under a Markdown heading."""
    for command, run in commands.items():
        if name in (command, "all"):
            print(f"\n## {command}\n")
            run(runner)


def main() -> None:
    experiments: dict[str, Callable[[Experiments], None]] = {
        "done-when": Experiments.done_when,
        "ttft-breakdown": Experiments.ttft_breakdown,
        "load": Experiments.load,
        "ablations": Experiments.ablations,
        "mixes": Experiments.mixes,
        "classes": Experiments.classes,
        "baselines": Experiments.baselines,
        "goodput": Experiments.goodput,
        "starvation": Experiments.starvation,
    }
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("name", choices=[*experiments, "all"])
    parser.add_argument("--requests", type=int, default=3500)
    parser.add_argument("--out", type=Path, default=Path("out/experiments"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    run_chosen(args.name, experiments, Experiments(args.requests, args.out))


if __name__ == "__main__":
    main()
