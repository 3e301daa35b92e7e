"""`rps-serve perf-inputs`: perf_analyzer `--input-data` files for rps_ensemble, one per modality."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "perf-inputs", help="perf_analyzer --input-data files for rps_ensemble (text, image, video)"
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", required=True, help="directory for text/image/video.json"
    )
    parser.add_argument(
        "--model",
        type=Path,
        metavar="DIR",
        help="served model directory, for media sizes (default: the tiny model)",
    )
    parser.add_argument("--per-modality", type=int, default=8, help="requests per file")
    parser.add_argument("--max-tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.loadtest.perf_inputs import perf_input_files
    from rps_harness.local.checkout import TINY_MODEL
    from rps_harness.workload.request_format import RequestFormat

    served = RequestFormat.of_model(args.model or TINY_MODEL)
    files = perf_input_files(args.out, served, args.per_modality, args.seed, args.max_tokens)
    for modality, path in files.items():
        print(f"{modality.value:<6} {path}")
    return 0
