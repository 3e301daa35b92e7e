"""Scale-out on the simulator: FCFS and RPS on 4 and 16 one-GPU replicas behind each router.

Run: `python benchmarks/scale_out.py [--requests N] [--seeds S,S] [--out DIR]`. Each replica serves
LLaVA-OneVision-7B on one GPU at the done-when point of `experiments.py` (mixed-iii, `RATE_1GPU`
requests per second per replica, that experiment's workload), so the cluster gets `RATE_1GPU` x
replicas requests per second and N x replicas requests in all. One replica is the done-when run itself
(every router gives it the same records), printed first for reference. Prints a Markdown table per
replica count and RPS/FCFS ratios per router; writes scale_out.json to `--out`.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from experiments import RATE_1GPU, SMALL
from rps_harness.metrics import grouped_metrics
from rps_harness.sim.routing import Routing
from rps_harness.sim.run import SimulationConfig, prepare, run_cluster
from rps_harness.workload.source import SyntheticWorkload

MIX = "mixed-iii"
REPLICA_COUNTS = (1, 4, 16)
POLICIES = ("fcfs", "rps")


def _run(replicas: int, requests: int, seed: int) -> list[dict[str, Any]]:
    """Every policy behind every router (one router for a single replica)."""
    workload = SyntheticWorkload(MIX, RATE_1GPU * replicas, requests * replicas, seed)
    setup = prepare(SimulationConfig(SMALL, 1, workload, seed))
    routers = [Routing.ROUND_ROBIN] if replicas == 1 else list(Routing)
    runs = []
    for routing in routers:
        for policy in POLICIES:
            outcome = run_cluster(setup, policy, replicas, routing)
            runs.append(
                {
                    "replicas": replicas,
                    "seed": seed,
                    "router": routing.value,
                    "policy": policy,
                    "rate": workload.rate,
                    "requests": workload.requests,
                    **grouped_metrics(outcome.records),
                    "completed": int(outcome.records.completed.sum()),
                    "routed": outcome.routed.tolist(),
                    "utilization": outcome.utilization.tolist(),
                    "preemptions": outcome.preemptions.tolist(),
                    "makespan_s": outcome.makespan_s,
                }
            )
    return runs


def _ttft(run: dict[str, Any], modality: str, stat: str) -> float:
    value = run["by_modality"][modality]["ttft"][stat]
    return float("nan") if value is None else float(value)


def _print_table(runs: list[dict[str, Any]]) -> None:
    print(
        "| seed | router | policy | text P99 TTFT | text mean | image mean | video mean | norm. latency"
        " | completed | requests per replica |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for run in runs:
        cells = [
            _ttft(run, "text", "p99"),
            _ttft(run, "text", "mean"),
            _ttft(run, "image", "mean"),
            _ttft(run, "video", "mean"),
            run["overall"]["norm_latency"]["mean"],
        ]
        numbers = " | ".join(f"{c:.3f}" for c in cells)
        spread = f"{min(run['routed'])}-{max(run['routed'])}"
        print(
            f"| {run['seed']} | {run['router']} | {run['policy']} | {numbers}"
            f" | {run['completed']} / {run['requests']} | {spread} |"
        )
    print("\n| seed | router | RPS/FCFS text P99 | RPS/FCFS video mean |\n|---|---|---:|---:|")
    by_key = {(run["seed"], run["router"], run["policy"]): run for run in runs}
    for seed, router, policy in by_key:
        if policy != "rps":
            continue
        rps, fcfs = by_key[seed, router, "rps"], by_key[seed, router, "fcfs"]
        text = _ttft(rps, "text", "p99") / _ttft(fcfs, "text", "p99")
        video = _ttft(rps, "video", "mean") / _ttft(fcfs, "video", "mean")
        print(f"| {seed} | {router} | {text:.2f} | {video:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3500, help="requests per replica")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated")
    parser.add_argument("--out", type=Path, default=Path("out/experiments"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    everything = []
    for replicas in REPLICA_COUNTS:
        runs = [run for seed in seeds for run in _run(replicas, args.requests, seed)]
        everything.extend(runs)
        rate = RATE_1GPU * replicas
        print(f"\n## {replicas} replica(s), {rate:g} req/s, {args.requests * replicas} requests\n")
        _print_table(runs)
    (args.out / "scale_out.json").write_text(json.dumps(everything, indent=1) + "\n")


if __name__ == "__main__":
    main()
