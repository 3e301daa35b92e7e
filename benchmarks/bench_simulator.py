"""Simulator speed and memory: 3,500 mixed-iii requests under one policy, and peak memory at 100,000.

Time excludes `prepare` (cost-model fit and trace generation, done once per run for all policies);
it is reported separately. Memory is the peak resident set of a fresh process that prepares and
simulates 100,000 requests. Run: `python benchmarks/bench_simulator.py` (pin to one core with taskset).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

from rps_harness.sim.run import SimulationConfig, prepare, run_policy
from rps_harness.workload.source import SyntheticWorkload
from rps_serve.profiles.reference import DEFAULT_REFERENCE


def _time_one(policy: str, requests: int, rate: float) -> tuple[float, float, int]:
    started = time.perf_counter()
    setup = prepare(SimulationConfig(DEFAULT_REFERENCE, 1, SyntheticWorkload("mixed-iii", rate, requests)))
    prepared = time.perf_counter()
    outcome = run_policy(setup, policy)
    return prepared - started, time.perf_counter() - prepared, outcome.steps


def _peak_rss_child(requests: int, rate: float, policy: str) -> None:
    _time_one(policy, requests, rate)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=14.0)
    parser.add_argument("--memory-requests", type=int, default=100_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--policy", default="rps")
    args = parser.parse_args()
    if args.child:
        _peak_rss_child(args.memory_requests, args.rate, args.policy)
        return
    print(f"{'policy':<8} {'requests':>8} {'prepare s':>9} {'simulate s':>10} {'steps':>7} {'us/step':>8}")
    for policy in ("fcfs", "rps", "rps-cap"):
        prep, sim, steps = _time_one(policy, 3_500, args.rate)
        print(f"{policy:<8} {3_500:8d} {prep:9.2f} {sim:10.2f} {steps:7d} {sim / steps * 1e6:8.1f}")
    for policy in ("fcfs", "rps"):
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, __file__, "--child", "--policy", policy, "--rate", str(args.rate),
             "--memory-requests", str(args.memory_requests)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        peak_mib = int(child.stdout.split()[-1]) / 1024
        print(f"{policy:<8} {args.memory_requests:8d} peak RSS {peak_mib:7.1f} MiB, {elapsed:.1f} s in all")


if __name__ == "__main__":
    main()
