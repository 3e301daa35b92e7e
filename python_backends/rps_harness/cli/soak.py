"""`rps-serve soak`: overload the local tritonserver in load-and-drain cycles; nothing lost, nothing leaks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rps_harness.cli.arguments import add_mix_argument
from rps_harness.cli.local_stack import add_local_server_arguments, repository_and_model
from rps_harness.workload.source import DEFAULT_MIX


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "soak", help="overload the local tritonserver with a mixed workload; check nothing is lost or leaks"
    )
    add_local_server_arguments(parser)
    parser.add_argument(
        "--minutes", type=float, default=20.0, help="time under load over all cycles (drains on top)"
    )
    parser.add_argument(
        "--cycles", type=int, default=4, help="load-and-drain cycles; the first is the warm-up (>= 2)"
    )
    parser.add_argument(
        "--sustained-rate",
        type=float,
        help="rate the server sustains, req/s (default: measured closed-loop first)",
    )
    parser.add_argument("--rate-factor", type=float, default=1.5, help="offered load = this x the rate")
    parser.add_argument("--calibrate-s", type=float, default=120.0, help="how long to measure the rate")
    add_mix_argument(parser, default=DEFAULT_MIX)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, metavar="DIR", default=Path("out/soak"), help="soak.json and the server log"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.loadtest.soak import CYCLE_HEADER, SoakConfig, cycle_row, run_soak
    from rps_harness.local.server import EngineSettings, launch_server
    from rps_harness.workload.request_format import RequestFormat
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    model = repository_and_model(args)
    config = SoakConfig(
        duration_s=args.minutes * 60,
        cycles=args.cycles,
        rate=args.sustained_rate,
        rate_factor=args.rate_factor,
        calibrate_s=args.calibrate_s,
        mix=args.mix,
        seed=args.seed,
    )
    workdir = (args.out / "server").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    print(f"starting tritonserver (log: {workdir / 'tritonserver.log'})")
    with launch_server(args.repository, workdir, EngineSettings(model=model)) as endpoints:
        pace = f"{config.rate:g} req/s" if config.rate else f"the rate measured over {config.calibrate_s:g} s"
        print(
            f"soak: {config.mix} through rps_ensemble, {config.cycles} cycles of {config.cycle_s / 60:g} min "
            f"at {config.rate_factor:g}x {pace}"
        )
        report = run_soak(endpoints, RequestFormat.of_model(model), config)
    (args.out / "soak.json").write_text(json.dumps(report.to_json(), indent=1) + "\n")
    print(
        f"sustainable {report.sustainable_rate:.2f} req/s, offered {report.offered_rate:.2f} req/s, "
        f"{config.cycles} cycles of {config.cycle_s:g} s"
    )
    print(f"cycle {CYCLE_HEADER}")
    for n, cycle in enumerate(report.cycles, 1):
        print(f"{n:5d} {cycle_row(cycle)}")
        print(f"      RSS after the drain: {_gigabytes(cycle.rss_drained_by_process)}")
        print(f"      of which shared memory: {_gigabytes(cycle.shm_drained_by_stub)}")
    print(f"resident memory growth, drained after the last cycle vs the first: {report.rss_growth:+.1%}")
    print("\n".join(report.failures()) or "all checks passed")
    print(f"wrote {args.out / 'soak.json'}")
    return 1 if report.failures() else 0


def _gigabytes(bytes_by_name: dict[str, int]) -> str:
    return ", ".join(f"{name} {value / 1e9:.2f} GB" for name, value in sorted(bytes_by_name.items()))
