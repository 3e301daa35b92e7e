"""`make fidelity`'s own logic: the commands it runs parse, seeds rotate the policies' order, and a row's
error is summarized over seeds, never over requests."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from benchmarks.fidelity import CLI, profile_command, rotated, summarize

from rps_harness.cli import parser


@pytest.mark.parametrize("resume", [False, True])
def test_the_profile_command_is_one_the_cli_accepts(tmp_path: Path, resume: bool) -> None:
    command = profile_command(tmp_path / "profile.jsonl", 5, resume)
    assert command[: len(CLI)] == CLI
    args = parser().parse_args(command[len(CLI) :])
    assert args.repeats == 5 and args.resume is resume


def test_every_policy_leads_once_in_as_many_seeds() -> None:
    orders = [rotated(["fcfs", "modality-priority", "rps"], i) for i in range(3)]
    assert [order[0] for order in orders] == ["fcfs", "modality-priority", "rps"]
    assert all(sorted(order) == ["fcfs", "modality-priority", "rps"] for order in orders)


def _row(seed: int, error: float | None, what: str = "text ttft") -> dict[str, object]:
    return {
        "model": "isolated",
        "load": "0.9x",
        "seed": seed,
        "policy": "rps",
        "what": what,
        "stat": "mean",
        "error": error,
    }


def test_a_row_is_the_geometric_mean_of_its_seeds_with_an_interval() -> None:
    rows = [
        _row(0, 0.2),
        _row(1, -0.1),
        _row(2, 0.05),
        _row(0, -0.5, "video ttft"),
        _row(1, None, "video ttft"),
    ]
    text, video = summarize(rows)
    assert text["seeds"] == 3
    assert text["ratio"] == pytest.approx(math.prod([1.2, 0.9, 1.05]) ** (1 / 3))
    low, high = text["interval"]
    assert low < text["ratio"] < high
    assert text["within_15"] and not text["interval_within_15"]
    # One seed with a value leaves no interval: nothing is claimed.
    assert video["seeds"] == 1 and video["ratio"] is None and video["interval"] is None
