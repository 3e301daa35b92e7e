"""`rps-serve bench`: a workload replayed against a running server (rps-serve serve), measured like
`rps-serve simulate` and written in its JSON shape."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rps_harness.cli.arguments import add_workload_arguments, lost_exit_code, workload


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "bench", help="replay a workload against a running server (rps-serve serve); simulate's JSON"
    )
    parser.add_argument("--url", required=True, help="gRPC HOST:PORT (rps-serve serve prints it)")
    parser.add_argument(
        "--metrics-url",
        help="the server's metrics endpoint (http://HOST:PORT/metrics): where each class waited",
    )
    add_workload_arguments(parser)
    parser.add_argument(
        "--model",
        type=Path,
        metavar="DIR",
        help="served model directory, for media sizes (default: the tiny model)",
    )
    parser.add_argument("--label", default="server", help="results key in the JSON, e.g. the policy")
    parser.add_argument("--max-text-tokens", type=int, default=4096, help="cap on a prompt's text tokens")
    parser.add_argument("--max-output-tokens", type=int, help="cap on output tokens (default: the trace's)")
    parser.add_argument(
        "--isolated", type=int, default=3, help="requests per modality sent alone for the SLOs"
    )
    parser.add_argument(
        "--slo", type=Path, metavar="FILE", help='TTFT SLOs from a file {"text": s, "image": s, "video": s}'
    )
    parser.add_argument(
        "--drain-s",
        type=float,
        metavar="S",
        help="how long to wait for answers after the last request is sent before the rest count as lost "
        "(default: derived from the load, see drain_allowance_s)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", required=True, help="where to write the results")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="also draw TTFT CDFs per modality (PNG)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.loadtest.load import BenchConfig, run_bench
    from rps_harness.loadtest.tables import stage_table, ttft_table
    from rps_harness.local.checkout import TINY_MODEL

    config = BenchConfig(
        url=args.url,
        model=args.model or TINY_MODEL,
        workload=workload(args),
        seed=args.seed,
        label=args.label,
        max_text_tokens=args.max_text_tokens,
        max_output_tokens=args.max_output_tokens,
        isolated=args.isolated,
        slo=args.slo,
        progress=not args.no_progress,
        metrics_url=args.metrics_url,
        drain_s=args.drain_s,
    )
    run = run_bench(config)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(run.report, indent=1) + "\n")
    result = run.report["results"][config.label]
    print(ttft_table({config.label: run.records}))
    if "stages" in result:
        print(stage_table({config.label: result["stages"]}))
    print(f"requests: {run.tally}")
    utilization = result["utilization"]
    shown = "unavailable" if utilization is None else f"{utilization:.2f}"
    print(f"GPU utilization (time-averaged): {shown}")
    for scale in ("1x", "2x", "4x"):
        slo = result["slo"][scale]
        print(
            f"SLO {scale}: goodput {slo['goodput_rps']:.2f} req/s, violations {slo['violation_rate']:.1%}, "
            f"severity {slo['severity']:.2f}"
        )
    print(f"wrote {args.json}")
    if args.plot:
        from rps_harness.plots import plot_ttft_cdf

        plot_ttft_cdf({config.label: run.records}, args.plot, f"{config.label} at {args.url}")
        print(f"wrote {args.plot}")
    return lost_exit_code([run.tally])
