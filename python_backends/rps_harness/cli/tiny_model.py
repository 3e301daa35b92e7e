"""`rps-serve make-tiny-model`: a tiny random Qwen2-VL or LLaVA-OneVision built offline (tests, CPU demo)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(commands: Any) -> None:
    from rps_harness.local.tiny_model import Family

    parser = commands.add_parser(
        "make-tiny-model", help="build a tiny random multimodal model offline (tests, CPU demo)"
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--family", choices=[f.value for f in Family], default=Family.QWEN2_VL.value)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument(
        "--image-size", type=int, default=672, help="images are this square (a Qwen2-VL resizes to it)"
    )
    parser.add_argument(
        "--video-size", type=int, default=448, help="video frames are this square (a Qwen2-VL resizes to it)"
    )
    parser.add_argument("--video-frames", type=int, default=24, help="frames per video the model expects")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.local.tiny_model import Family, TinyModelSpec, build_tiny_model
    from rps_harness.workload.request_format import RequestFormat
    from rps_serve.requests import Modality

    spec = TinyModelSpec(
        family=Family(args.family),
        layers=args.layers,
        hidden=args.hidden,
        image_size=args.image_size,
        video_size=args.video_size,
        video_frames=args.video_frames,
        seed=args.seed,
    )
    build_tiny_model(args.out, spec)
    served = RequestFormat.of_model(args.out)
    print(
        f"wrote {args.out}: a {spec.family.value}, {spec.layers} layers, hidden {spec.hidden}; "
        f"a {spec.image_size}x{spec.image_size} image is {served.placeholder_tokens(Modality.IMAGE)} "
        f"placeholder tokens, a {spec.video_frames}-frame video {served.placeholder_tokens(Modality.VIDEO)}"
    )
    return 0
