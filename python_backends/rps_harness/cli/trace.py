"""`rps-serve trace`: a synthetic workload written as a trace file (JSONL), for the simulator or client."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rps_harness.cli.arguments import add_workload_arguments, workload
from rps_harness.workload.trace import write_trace


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "trace", help="write a workload trace (JSONL) for the simulator or load client"
    )
    add_workload_arguments(parser, trace=False)
    parser.add_argument("--out", type=Path, metavar="FILE", required=True, help="the trace file to write")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    trace = workload(args).trace()
    write_trace(args.out, trace)
    print(f"wrote {len(trace)} requests over {trace.arrival_s[-1]:.1f} s to {args.out}")
    return 0
