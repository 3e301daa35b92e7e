"""`rps-serve demo`: a mixed workload through the local tritonserver under each policy (a fresh server
per policy's runs, or one with an engine per policy), at one or more fractions of the measured capacity,
seeds fixed first, policies interleaved."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rps_harness.cli.arguments import (
    add_mix_argument,
    add_policies_argument,
    cost_model_source,
    lost_exit_code,
    names,
    policies,
)
from rps_harness.cli.local_stack import add_local_server_arguments, repository_and_model
from rps_harness.metrics import STEADY_STATE_TRIM
from rps_harness.sim.simulator import served_names
from rps_harness.workload.source import DEFAULT_MIX
from rps_serve.scheduling.parameters import SHIPPED_POLICY


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="replay a mixed workload through the local tritonserver under FCFS, vLLM priority and RPS",
    )
    add_local_server_arguments(parser)
    add_policies_argument(parser, f"fcfs,vllm-priority,{SHIPPED_POLICY.value}", served_names())
    add_mix_argument(parser, default=DEFAULT_MIX)
    parser.add_argument(
        "--rate", help="arrival rates, requests per second, comma-separated (default: measured, see below)"
    )
    parser.add_argument(
        "--load-fraction",
        default="0.8",
        help="without --rate: these x the measured sustained rate, comma-separated (e.g. 0.6,0.9)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="seeds: paired traces every policy replays")
    parser.add_argument(
        "--calibrate-s", type=float, default=30.0, help="closed-loop seconds: the capacity search's ceiling"
    )
    parser.add_argument("--probes", type=int, default=3, help="open-loop probes bisecting the capacity")
    parser.add_argument("--probe-s", type=float, default=45.0, help="seconds of arrivals per probe")
    parser.add_argument("--requests", type=int, default=150, help="requests per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--front-end",
        choices=["class", "vllm"],
        help="every policy on this front end (default: each its own, as it ships)",
    )
    parser.add_argument(
        "--engine-args",
        default="",
        metavar="JSON",
        help="vLLM engine arguments over model.json's for every server "
        "(e.g. a KV cache too small for the backlog: '{\"num_gpu_blocks_override\": 600}')",
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="leave the engine's worker where the OS puts it"
    )
    parser.add_argument(
        "--reuse-servers",
        action="store_true",
        help="keep a server for the next run where the same policy runs next, the capacity search's "
        "FCFS server included (fewer server starts; each seed's policies still run back to back, in "
        "the reverse order of the seed before)",
    )
    parser.add_argument(
        "--one-server",
        action="store_true",
        help="one tritonserver for every run, with an engine per policy behind its own ensemble "
        "(rps_ensemble-POLICY): one start instead of one per policy switch",
    )
    parser.add_argument(
        "--warm-up",
        type=float,
        default=STEADY_STATE_TRIM,
        metavar="SHARE",
        help="the share of each run's first arrivals left out of its steady window, where the queue "
        f"a policy orders is still forming (default {STEADY_STATE_TRIM:g}; the last {STEADY_STATE_TRIM:g} "
        "are always left out)",
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", default=Path("out/demo"), help="results, plots and server logs"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.loadtest.demo import DemoConfig, run_demo
    from rps_harness.loadtest.demo_report import fit_lines, machine_speed_lines, save_results, target_lines
    from rps_harness.loadtest.tables import (
        engine_table,
        first_token_step_table,
        first_token_tail_table,
        process_table,
        ratio_table,
        run_stage_table,
        token_parts_table,
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
        probes=args.probes,
        probe_s=args.probe_s,
        requests=args.requests,
        seed=args.seed,
        front_end=args.front_end,
        engine_args=args.engine_args,
        pin=not args.no_pin,
        reuse_servers=args.reuse_servers,
        one_server=args.one_server,
        warm_up=args.warm_up,
    )
    pace = (
        f"at {args.rate} req/s"
        if config.rates
        else f"at {args.load_fraction}x the open-loop capacity (searched first)"
    )
    servers = "each run on a fresh tritonserver"
    if config.one_server:
        servers = "one tritonserver with an engine per policy, each behind its own rps_ensemble"
    elif config.reuse_servers:
        servers = "a server kept where a policy runs on"
    print(
        f"replaying {config.requests} {config.mix} requests {pace} through rps_ensemble, {config.repeats} "
        f"paired seeds per policy ({', '.join(config.policies)}), interleaved, {servers}"
        + f"; classes from the cost model in {args.repository}, trained on "
        f"{cost_model_source(args.repository)}; server logs in {config.out}",
        flush=True,
    )
    demo = run_demo(config, progress=lambda line: print(line, flush=True))
    if demo.open_loop is not None and demo.closed_loop is not None:
        print(
            f"capacity: {demo.open_loop.describe()}; "
            f"closed loop {demo.closed_loop.rate:.2f} req/s with {demo.closed_loop.concurrency} in flight"
        )
    for load in demo.loads:
        print(
            f"\n{load.name}: steady state (arrivals from {config.warm_up:.0%} to {1 - STEADY_STATE_TRIM:.0%} "
            f"of each run's) of {config.repeats} paired run(s) per policy"
        )
        records, ratios = load.pooled_records(), load.ratios
        print(ttft_table(records))
        print(ratio_table(ratios, load.candidate))
        for line in [*target_lines(load, config.repository, config.mix), *fit_lines(load, config.repository)]:
            print(line)
        analysis = load.analysis()
        print(engine_table(analysis))
        for line in machine_speed_lines(load):
            print(line)
        print(run_stage_table(analysis))
        print(first_token_step_table(analysis))
        print(first_token_tail_table(analysis))
        print(token_parts_table(analysis))
        print(process_table(load.runs))
        for policy, tally in load.tallies().items():
            print(f"{policy}: {tally}")
    print("wrote " + ", ".join(str(path) for path in save_results(demo, config)))
    return lost_exit_code(demo.tallies())
