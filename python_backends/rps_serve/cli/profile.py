"""`rps-serve profile`: isolated runs of every planned request on a real vLLM engine -> profile records."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rps_serve.profiles.records import read_records


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("profile", help="isolated runs on a real vLLM engine -> profile records")
    parser.add_argument(
        "--model", type=Path, metavar="DIR", required=True, help="model built by `rps-serve make-tiny-model`"
    )
    parser.add_argument("--out", type=Path, metavar="FILE", required=True, help="JSONL profile records")
    parser.add_argument("--repeats", type=int, default=3, help="runs of every planned request")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--resume", action="store_true", help="continue a partly written profile")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
    from rps_serve.workload.request_format import RequestFormat
    from rps_serve.workload_profiler.isolated import IsolatedProfiler, profiling_engine
    from rps_serve.workload_profiler.plan import ProfilePlan

    done = sum(1 for _ in read_records(args.out)) if args.out.exists() else 0
    if done and not args.resume:
        raise ValueError(f"{args.out} already holds {done} records; pass --resume to continue it")
    plan = ProfilePlan(repeats=args.repeats)
    items = plan.items()[done:]
    configure_cpu_engine_environment(args.out.parent / ".vllm")
    engine, timer = profiling_engine(args.model, args.max_model_len)
    profiler = IsolatedProfiler(
        engine, timer, RequestFormat.of_model(args.model), plan.output_tokens, args.seed + done
    )
    for warm_up in plan.items()[:2]:  # first calls pay one-off initialization
        profiler.run(warm_up)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", encoding="utf-8") as out:
        for item in tqdm(items, desc="isolated runs", unit="request"):
            out.write(profiler.run(item).to_json() + "\n")
            out.flush()
    print(f"{args.out}: {done + len(items)} records ({len(items)} new)")
    return 0
