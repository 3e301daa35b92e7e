"""`rps-serve make-tiny-model`: a tiny random Qwen2-VL built offline (tests, the CPU demo)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "make-tiny-model", help="build a tiny random Qwen2-VL offline (tests, CPU demo)"
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=672, help="images are resized to this square")
    parser.add_argument("--video-size", type=int, default=448, help="video frames are resized to this square")
    parser.add_argument("--video-frames", type=int, default=24, help="frames per video the model expects")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_serve.tiny_model import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(
        layers=args.layers,
        hidden=args.hidden,
        image_size=args.image_size,
        video_size=args.video_size,
        video_frames=args.video_frames,
        seed=args.seed,
    )
    build_tiny_model(args.out, spec)
    print(
        f"wrote {args.out}: {spec.layers} layers, hidden {spec.hidden}; an image is {spec.image_tokens} "
        f"placeholder tokens, a {spec.video_frames}-frame video {spec.video_tokens}"
    )
    return 0
