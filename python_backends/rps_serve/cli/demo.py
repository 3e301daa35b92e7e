"""`rps-serve demo`: a mixed workload through the local tritonserver under each policy, each run on a
fresh server, at one or more fractions of the measured capacity, repeats interleaved and pooled."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rps_serve.cli.arguments import (
    add_local_server_arguments,
    add_mix_argument,
    add_policies_argument,
    cost_model_source,
    lost_exit_code,
    names,
    policies,
    repository_and_model,
)
from rps_serve.scheduling.parameters import Policy
from rps_serve.workload.source import DEFAULT_MIX


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="replay a mixed workload through the local tritonserver under FCFS, vLLM priority and RPS",
    )
    add_local_server_arguments(parser)
    add_policies_argument(parser, "fcfs,vllm-priority,rps", [p.value for p in Policy])
    add_mix_argument(parser, default=DEFAULT_MIX)
    parser.add_argument(
        "--rate", help="arrival rates, requests per second, comma-separated (default: measured, see below)"
    )
    parser.add_argument(
        "--load-fraction",
        default="0.7",
        help="without --rate: these x the measured sustained rate, comma-separated (e.g. 0.6,0.9)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="runs per policy and load, interleaved")
    parser.add_argument("--calibrate-s", type=float, default=60.0, help="how long to measure the rate")
    parser.add_argument("--requests", type=int, default=120, help="requests per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, metavar="DIR", default=Path("out/demo"), help="results, plots and server logs"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_serve.loadtest.demo import (
        DemoConfig,
        ratio_table,
        run_demo,
        save_results,
        stage_table,
        ttft_table,
    )

    config = DemoConfig(
        repository=args.repository,
        model=repository_and_model(args),
        out=args.out,
        policies=policies(args),
        mix=args.mix,
        rates=[float(r) for r in names(args.rate or "")],
        load_fractions=[float(f) for f in names(args.load_fraction)],
        repeats=args.repeats,
        calibrate_s=args.calibrate_s,
        requests=args.requests,
        seed=args.seed,
    )
    pace = (
        f"at {args.rate} req/s"
        if config.rates
        else f"at {args.load_fraction}x the rate this machine sustains (measured first, "
        f"{config.calibrate_s:g} s closed-loop)"
    )
    runs = "once" if config.repeats == 1 else f"{config.repeats} times, interleaved,"
    print(
        f"replaying {config.requests} {config.mix} requests {pace} through rps_ensemble, {runs} per "
        f"policy ({', '.join(config.policies)}), each on a fresh tritonserver; classes from the cost "
        f"model in {args.repository}, trained on {cost_model_source(args.repository)}",
        flush=True,
    )
    demo = run_demo(config)
    if demo.capacity is not None:
        capacity = demo.capacity
        print(
            f"sustained {capacity.rate:.2f} req/s ({capacity.completed} completed in "
            f"{capacity.duration_s:g} s with {capacity.concurrency} in flight)"
        )
    for load in demo.loads:
        print(f"\n{load.name}, {config.repeats} run(s) per policy pooled")
        records = load.records()
        print(ttft_table(records))
        print(ratio_table(records, candidate=Policy.RPS.value))
        print(stage_table(load.stages()))
        for policy, tally in load.tallies().items():
            print(f"{policy}: {tally}")
    print("wrote " + ", ".join(str(path) for path in save_results(demo, config)))
    return lost_exit_code(demo.tallies())
