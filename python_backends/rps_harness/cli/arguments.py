"""Arguments several commands share, declared once: the workload and policy lists (the local
server's: `local_stack`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rps_harness.workload.mixes import MIXES
from rps_harness.workload.shapes import ISOLATION, SHAPES
from rps_harness.workload.source import DEFAULT_MIX, SyntheticWorkload, TraceFile, Workload
from rps_serve.cost.runtime import REPORT_FILE

if TYPE_CHECKING:
    from rps_harness.client import Tally

_SYNTHETIC = ("mix", "rate", "requests", "burst_cv", "shapes")


def add_workload_arguments(
    parser: argparse.ArgumentParser, trace: bool = True, default_requests: int = 1000
) -> None:
    """A synthetic workload (`--mix/--rate/--requests/--burst-cv/--shapes`) or, with `trace`, `--trace FILE`;
    `workload` builds it and refuses both at once. `--seed` also drives what else the command draws."""
    group = parser.add_argument_group("workload" + (" (synthetic, or --trace)" if trace else ""))
    add_mix_argument(group, default=None)
    group.add_argument("--rate", type=float, help="mean arrival rate, requests per second")
    group.add_argument("--requests", type=int, help=f"number of requests (default {default_requests})")
    group.add_argument(
        "--burst-cv", type=float, help="Gamma arrivals with this coefficient of variation instead of Poisson"
    )
    group.add_argument(
        "--shapes",
        choices=list(SHAPES),
        help="token-count distributions: isolation (the profiles' isolated runs) or serving (the paper's"
        " serving runs: 32-frame videos, answers by dataset); default isolation, except simulate with a"
        " LLaVA-OneVision reference profile: serving (rps_harness.workload.shapes)",
    )
    if trace:
        group.add_argument(
            "--trace", type=Path, metavar="FILE", help="the requests of this trace file (rps-serve trace)"
        )
    group.add_argument("--seed", type=int, default=0)
    parser.set_defaults(default_requests=default_requests)


def add_mix_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: str | None) -> None:
    """`--mix NAME`, one of the request-kind mixes; `default` None lets `workload` tell it was given."""
    parser.add_argument(
        "--mix",
        choices=list(MIXES),
        default=default,
        metavar="MIX",
        help=f"request-kind mix: {', '.join(MIXES)} (default {DEFAULT_MIX})",
    )


def workload(args: argparse.Namespace, default_shapes: str = ISOLATION) -> Workload:
    """The workload `add_workload_arguments` described: a trace file, or a mix at a rate with the
    token-count shapes `--shapes` names (else `default_shapes`)."""
    path = getattr(args, "trace", None)
    if path is not None:
        given = [f"--{name.replace('_', '-')}" for name in _SYNTHETIC if getattr(args, name) is not None]
        if given:
            raise ValueError(f"--trace replaces {', '.join(given)}: give a trace or a synthetic workload")
        return TraceFile(path)
    if args.rate is None:
        alternative = " or --trace FILE" if hasattr(args, "trace") else ""
        raise ValueError(f"give --rate (with --mix, --requests){alternative}")
    return SyntheticWorkload(
        mix=args.mix or DEFAULT_MIX,
        rate=args.rate,
        requests=args.requests if args.requests is not None else args.default_requests,
        seed=args.seed,
        burst_cv=args.burst_cv,
        shapes=args.shapes or default_shapes,
    )


def add_policies_argument(parser: argparse.ArgumentParser, default: str, choices: Sequence[str]) -> None:
    """`--policies a,b,...`, each one of `choices`; `policies` reads it."""
    parser.add_argument("--policies", default=default, help=f"comma-separated, from {', '.join(choices)}")
    parser.set_defaults(policy_choices=tuple(choices))


def policies(args: argparse.Namespace) -> list[str]:
    """The policies `add_policies_argument` declared, checked against its choices."""
    chosen = names(args.policies)
    unknown = [p for p in chosen if p not in args.policy_choices]
    if unknown:
        expected = ", ".join(args.policy_choices)
        raise ValueError(f"unknown policy {', '.join(map(repr, unknown))}; expected some of {expected}")
    if not chosen:
        raise ValueError("--policies names no policy")
    return chosen


def names(value: str) -> list[str]:
    """The items of a comma-separated list."""
    return [item.strip() for item in value.split(",") if item.strip()]


def cost_model_source(repository: Path) -> str:
    """What the repository's cost model was trained on, from its report."""
    try:
        return str(json.loads((repository / REPORT_FILE).read_text())["source"])
    except (OSError, ValueError, KeyError):
        return "(no report)"


def lost_exit_code(tallies: Sequence[Tally]) -> int:
    """1 (and a message) if any request got no answer: something hung; else 0."""
    lost = sum(t.lost for t in tallies)
    if lost:
        print(f"{lost} requests got no final response before the deadline", file=sys.stderr)
    return 1 if lost else 0
