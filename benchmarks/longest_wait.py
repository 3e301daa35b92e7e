"""The longest wait per class as a function of load: the starvation guarantee a user reads.

Run: `python benchmarks/longest_wait.py [--policy P] [--requests N] [--out DIR]` (`make longest-wait`).
On both deployments of `h100_comparison` (7B on 1 GPU, 72B on 4) and mixed-iii (texts, images and
videos in all three classes) at `LOADS` x the simulated capacity, seeds `h100_comparison.SEEDS`
(fixed in code before any run): per class, the longest time any request of that class waited for its
first token over whole runs (the drain too), the longest over the seeds, for the policy and beside it
the stock priorities and FCFS.

The guarantee checked is the one docs/limits-and-guarantees.md states (`comparison.wait_checks`): in
every run, no class waits longer under the policy than `comparison.STOCK_WAIT_MARGIN` times its longest
wait under the better of the two stock priorities on the same trace, the margin of the heavier classes
stretched by the policy's light steps where it has them (`light_steps.wait_stretch`: the step's token
budget over the light-step budget). Every check is counted, each
failure printed; the command exits non-zero where one fails, so a change that lets a class starve
fails it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path

from h100_comparison import DEPLOYMENTS, SEEDS, Comparison, Setting, _model
from rps_harness.comparison import (
    STOCK_PRIORITIES,
    STOCK_WAIT_MARGIN,
    WaitCheck,
    longest_ttft_per_class,
    wait_checks,
)
from rps_harness.sim.run import light_stretch, prepare
from rps_harness.sim.simulator import policy_variant
from rps_serve.requests import RequestClass

MIX = "mixed-iii"
LOADS = (0.5, 0.7, 0.9, 1.1, 1.3)


def sweep(comparison: Comparison, policy: str) -> tuple[list[dict[str, object]], list[WaitCheck]]:
    """Print each deployment's table of longest waits by load; returns them as JSON and every check."""
    policies = ("fcfs", *STOCK_PRIORITIES, policy)
    labels = [c.label for c in RequestClass]
    results: list[dict[str, object]] = []
    checks: list[WaitCheck] = []
    for reference, gpus in DEPLOYMENTS:
        capacity = comparison.capacity(reference, gpus, Setting(MIX, MIX, 1.0))
        unit = prepare(comparison.config(reference, gpus, Setting(MIX, MIX, 1.0), capacity.rate, SEEDS[0]))
        stretch = light_stretch(unit, policy)
        print(
            f"### {_model(reference, gpus)}, {MIX}, capacity {capacity.rate:.2f} req/s; heavier classes"
            f" held to {STOCK_WAIT_MARGIN * stretch:.3g}x (light steps' stretch {stretch:.3g})\n"
        )
        print(
            "| load | policy | " + " | ".join(f"longest {label} TTFT (s)" for label in labels) + " |\n"
            "|---:|---|" + "---:|" * len(labels)
        )
        for load in LOADS:
            runs, _ = comparison.runs(reference, gpus, Setting(MIX, MIX, load), policies)
            per_run = {p: [longest_ttft_per_class(r) for r in runs[p]] for p in policies}
            longest = {p: {c: max(run[c] for run in per_run[p]) for c in labels} for p in policies}
            for p in policies:
                print(f"| {load:g} | {p} | " + " | ".join(f"{longest[p][c]:.3g}" for c in labels) + " |")
            load_checks = wait_checks(runs[policy], {s: runs[s] for s in STOCK_PRIORITIES}, stretch=stretch)
            checks += load_checks
            results.append(
                {
                    "reference": reference,
                    "gpus": gpus,
                    "load": load,
                    "capacity": capacity.rate,
                    "longest_s": longest,
                    "per_run_s": per_run,
                    "failed_checks": [asdict(c) for c in load_checks if not c.holds],
                }
            )
        print()
    return results, checks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default="headroom", help="the policy held to the guarantee")
    parser.add_argument("--requests", type=int, default=3500)
    parser.add_argument("--out", type=Path, default=Path("out/longest-wait"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    policy_variant(args.policy)  # fail on a bad name before any run
    print(
        f"{len(SEEDS)} seeds ({', '.join(map(str, SEEDS))}), {args.requests} requests a run; longest TTFT"
        " per class over whole runs, the longest over the seeds.\n"
    )
    results, checks = sweep(Comparison(args.requests, args.out), args.policy)
    failed = [c for c in checks if not c.holds]
    print(
        f"{args.policy} within {STOCK_WAIT_MARGIN:g}x (heavier classes: times its light steps' stretch) the"
        f" better stock priority's longest wait, per run and class: {len(checks) - len(failed)} of"
        f" {len(checks)} checks hold"
    )
    for c in failed:
        print(
            f"- over: seed {SEEDS[c.run]}, {c.label}: {c.policy_s:.3g} s against a bound of {c.bound_s:.3g} s"
        )
    (args.out / "longest_wait.json").write_text(json.dumps(results, indent=1) + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
