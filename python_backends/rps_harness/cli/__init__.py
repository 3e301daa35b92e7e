"""`rps-serve` command line: one module per command, each declaring its arguments (`add_parser`) and
handling them (`run`); arguments several commands share live in `arguments`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence

from rps_harness.cli import (
    ab,
    bench,
    claims,
    classify,
    demo,
    perf_inputs,
    profile,
    serve,
    simulate,
    soak,
    tiny_model,
    trace,
    train,
)

COMMANDS = (
    train,
    classify,
    tiny_model,
    simulate,
    profile,
    ab,
    trace,
    serve,
    demo,
    claims,
    soak,
    bench,
    perf_inputs,
)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="rps-serve", description=__doc__)
    root.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = root.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(commands)
    return root


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so that every server a command started is stopped on the way out
    (the default action would leave them running)."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return int(args.handler(args))
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        # Bad arguments, a missing file, a server that failed to start or to serve: a message, no traceback.
        print(f"rps-serve {args.command}: {error}", file=sys.stderr)
        return 2
