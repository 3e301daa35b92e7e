"""`rps-serve profile`: isolated runs of every planned request on a real vLLM engine, set up as the
repository serves the model -> profile records."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rps_harness.cli.local_stack import add_local_server_arguments
from rps_serve.profiles.records import read_records


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("profile", help="isolated runs on a real vLLM engine -> profile records")
    add_local_server_arguments(parser, default_model="the repository's, as model.json names it")
    parser.add_argument("--out", type=Path, metavar="FILE", required=True, help="JSONL profile records")
    parser.add_argument("--repeats", type=int, default=3, help="runs of every planned request")
    parser.add_argument("--resume", action="store_true", help="continue a partly written profile")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.workload_profiler.isolated import engine_log_of, profile_served_model
    from rps_serve.triton.settings import SETTINGS_FILE, read_settings

    done = sum(1 for _ in read_records(args.out)) if args.out.exists() else 0
    if done and not args.resume:
        raise ValueError(f"{args.out} already holds {done} records; pass --resume to continue it")
    # The model as the repository serves it: its engine arguments (with RPS_MODEL and RPS_ENGINE_ARGS).
    served = read_settings(args.repository / SETTINGS_FILE, args.repository)
    model = args.model or served.model
    print(f"profiling {model} one request at a time; the engine's output goes to {engine_log_of(args.out)}")
    run = profile_served_model(model, served.engine_args, args.out, args.repeats, args.seed)
    print(f"{args.out}: {done + run.written} records ({run.describe()}); engine log {run.engine_log}")
    return 0
