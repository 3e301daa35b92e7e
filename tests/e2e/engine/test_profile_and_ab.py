"""The Workload Profiler and `rps-serve ab` against real vLLM engines on the tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rps_harness.cli import main
from rps_harness.workload_profiler.plan import ProfilePlan
from rps_serve.cost.training import TrainingOptions, fit_cost_model
from rps_serve.profiles.records import read_records
from rps_serve.requests import Modality


def test_profile_records_grow_with_the_request_and_resume(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "profile.jsonl"
    assert main(["profile", "--model", str(tiny_model), "--out", str(out), "--repeats", "1"]) == 0
    first = list(read_records(out))
    plan = ProfilePlan(repeats=1)
    assert [r.modality for r in first] == [item.modality for item in plan.items()]

    def by(modality: Modality, field: str) -> np.ndarray:
        return np.array([getattr(r, field) for r in first if r.modality is modality])

    assert np.all(np.diff(by(Modality.TEXT, "prompt_tokens")) > 0)  # growing text lengths
    assert np.all(np.diff(by(Modality.VIDEO, "modality_tokens")) > 0)  # growing video lengths
    assert np.all(by(Modality.TEXT, "modality_tokens") == 0)
    images = by(Modality.IMAGE, "modality_tokens")  # growing sizes, up to the model's cap
    assert np.all(np.diff(images) >= 0) and images[0] < images[-1]
    assert np.all(by(Modality.VIDEO, "encoder_s") > 0) and np.all(by(Modality.IMAGE, "encoder_s") > 0)
    assert all(r.prefill_s > 0 and r.output_tokens == plan.output_tokens for r in first)
    fit_cost_model(first, TrainingOptions())  # the records train a cost model

    assert main(["profile", "--model", str(tiny_model), "--out", str(out), "--repeats", "1"]) == 2
    assert main(["profile", "--model", str(tiny_model), "--out", str(out), "--repeats", "2", "--resume"]) == 0
    resumed = list(read_records(out))
    assert resumed[: len(first)] == first and len(resumed) == 2 * len(first)


def test_ab_runs_every_policy_to_completion(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    args = ["ab", "--model", str(tiny_model), "--mix", "mixed-iii", "--rate", "4", "--requests", "8"]
    assert main([*args, "--repeats", "1", "--policies", "fcfs,rps", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"fcfs", "rps"}
    for result in report["results"].values():
        assert result["completed"] == result["requests"] == 8
        assert set(result["by_modality"]) == {"text", "image", "video"}
        assert set(result["by_class"]) == {"sand", "pebbles", "rocks"}
        assert set(result["overall"]["ttft"]) == {"mean", "p50", "p90", "p95", "p99"}
        assert result["overall"]["ttft"]["p50"] > 0
