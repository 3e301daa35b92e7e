"""Arguments of the commands that start the local server (serve, profile, soak, demo): the repository
to serve and the model to run, made ready to serve."""

from __future__ import annotations

import argparse
from pathlib import Path

from rps_harness.local.checkout import REPOSITORY


def add_local_server_arguments(
    parser: argparse.ArgumentParser, default_model: str = "the tiny model, built if missing"
) -> None:
    """What `repository_and_model` reads: the repository to serve and the model to run."""
    parser.add_argument("--repository", type=Path, metavar="DIR", default=REPOSITORY, help="model repository")
    parser.add_argument(
        "--model", type=Path, metavar="DIR", help=f"model directory (default: {default_model})"
    )


def repository_and_model(args: argparse.Namespace) -> Path:
    """The model a local server runs (`--model`, else the tiny model, built if missing), with the
    repository's cost models made for it if they are missing (`local.repository.ready_to_serve`)."""
    from rps_harness.local.checkout import TINY_MODEL
    from rps_harness.local.repository import ensure_tiny_model, ready_to_serve

    if args.model is None:
        ensure_tiny_model(TINY_MODEL)
    return ready_to_serve(args.repository, Path(args.model) if args.model is not None else TINY_MODEL, print)
