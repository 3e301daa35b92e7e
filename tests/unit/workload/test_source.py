"""A run's workload: a mix at a rate, or a trace file; the command line refuses both at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rps_harness.cli import main
from rps_harness.workload.source import SyntheticWorkload, TraceFile
from rps_harness.workload.trace import write_trace


def test_a_synthetic_workload_draws_its_trace_from_its_seed() -> None:
    workload = SyntheticWorkload("mixed-v", rate=3.0, requests=40, seed=4)
    first, again = workload.trace(), workload.trace()
    assert len(first) == 40 and np.array_equal(first.arrival_s, again.arrival_s)
    other = SyntheticWorkload("mixed-v", rate=3.0, requests=40, seed=5).trace()
    assert not np.array_equal(first.arrival_s, other.arrival_s)
    assert workload.to_json() == {
        "mix": "mixed-v",
        "rate": 3.0,
        "requests": 40,
        "seed": 4,
        "burst_cv": None,
        "shapes": "isolation",
        "stratified": False,
    }


def test_a_trace_file_replays_its_rows(tmp_path: Path) -> None:
    trace = SyntheticWorkload(rate=2.0, requests=12, seed=1).trace()
    write_trace(tmp_path / "t.jsonl", trace)
    source = TraceFile(tmp_path / "t.jsonl")
    assert np.allclose(source.trace().arrival_s, trace.arrival_s)
    assert source.to_json() == {"trace": str(tmp_path / "t.jsonl")}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mix": "lifo"}, "unknown mix"),
        ({"rate": 0.0}, "rate must be positive"),
        ({"requests": 0}, "at least one"),
    ],
)
def test_bad_synthetic_workloads_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SyntheticWorkload(**fields)  # type: ignore[arg-type]


def test_a_workload_needs_a_rate_or_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "--requests", "5", "--out", str(tmp_path / "t.jsonl")]) == 2
    assert "give --rate" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()
