"""Measured simulator profiles: robust line fits, the front end from isolated runs, and
`rps-serve simulate --measured FILE.json --trace FILE`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rps_harness.cli import main
from rps_harness.sim.measured import (
    LoadedSteps,
    MeasuredProfile,
    as_served,
    decode_costs,
    front_end_seconds,
    robust_lines,
)
from rps_harness.sim.simulator import policy_variant
from rps_harness.workload.mixes import mix_by_name
from rps_harness.workload.trace import Trace, generate_trace, write_trace
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality

TRUE = {
    Modality.TEXT: PrefillLine(0.005, 7e-5),
    Modality.IMAGE: PrefillLine(0.040, 7e-5),  # images are all one size: only a level is measurable
    Modality.VIDEO: PrefillLine(0.020, 1.1e-4),
}


def _records(rng: np.random.Generator) -> list[ProfileRecord]:
    sizes = {
        Modality.TEXT: [30, 80, 150, 300, 600, 1200, 2400],
        Modality.IMAGE: [627, 629, 630, 631],
        Modality.VIDEO: [300, 560, 1080, 2100, 4150],
    }
    records = []
    for modality, tokens in sizes.items():
        line = TRUE[modality]
        for n in tokens:
            for repeat in range(3):
                seconds = line.intercept + line.slope * n
                if repeat == 2 and n == tokens[1]:
                    seconds *= 4  # one slow run of a shared machine
                seconds *= 1 + 0.01 * rng.standard_normal()
                visual = 0 if modality is Modality.TEXT else n - 20
                records.append(ProfileRecord(modality, n, visual, 0.0, seconds, 8))
    return records


def _profile(front: dict[Modality, float]) -> MeasuredProfile:
    return MeasuredProfile(
        name="test-stack",
        lines=TRUE,
        decode_step_s=0.004,
        kv_token_s=5e-7,
        front_end_s=front,
        kv_capacity_tokens=200_000,
        max_num_batched_tokens=2048,
        max_num_seqs=256,
        rps_chunk_cap_tokens=256,
        cost_profile="llava-onevision-qwen2-7b",
        rps_decode_hold_s=0.125,
        rps_decode_hold_media_only=True,
        aging_time_scale=2.5,
    )


def test_robust_lines_ignore_an_outlier_and_keep_the_text_slope_for_fixed_sizes() -> None:
    lines = robust_lines(_records(np.random.default_rng(0)))
    for modality in (Modality.TEXT, Modality.VIDEO):
        assert lines[modality].slope == pytest.approx(TRUE[modality].slope, rel=0.05)
        assert lines[modality].intercept == pytest.approx(TRUE[modality].intercept, abs=0.003)
    assert lines[Modality.IMAGE].slope == lines[Modality.TEXT].slope
    image_at_630 = lines[Modality.IMAGE].intercept + lines[Modality.IMAGE].slope * 630
    assert image_at_630 == pytest.approx(
        TRUE[Modality.IMAGE].intercept + TRUE[Modality.IMAGE].slope * 630, rel=0.03
    )


def test_decode_costs_split_time_per_token_into_step_and_kv_reads() -> None:
    rng = np.random.default_rng(1)
    context = rng.uniform(50, 4000, size=30)
    tpot = 0.005 + 6e-7 * context + 0.0002 * rng.standard_normal(30)
    tpot[::7] *= 3  # contended runs
    tpot[3] = np.nan  # a one-token answer has none
    step, per_kv_token = decode_costs(context, tpot, token_s=1e-4)
    assert step == pytest.approx(0.005 - 1e-4, abs=3e-4)
    assert per_kv_token == pytest.approx(6e-7, rel=0.25)


def test_front_end_is_what_the_server_adds_to_the_engine() -> None:
    trace = generate_trace(mix_by_name("mixed-iii"), 1.0, 40, seed=2)
    deployment = _profile({m: 0.0 for m in Modality}).deployment()
    engine = deployment.isolated_ttft_s(trace)
    added = np.array([0.03, 0.12, 0.25])[trace.modality]
    front = front_end_seconds(deployment, trace, engine + added)
    assert front == pytest.approx({Modality.TEXT: 0.03, Modality.IMAGE: 0.12, Modality.VIDEO: 0.25})
    # With those costs the deployment's isolated TTFT is the server's again.
    assert _profile(front).deployment().isolated_ttft_s(trace) == pytest.approx(engine + added)


def test_profile_round_trips_and_class_aware_policies_run_as_the_plug_in_serves_them() -> None:
    profile = _profile({Modality.TEXT: 0.03, Modality.IMAGE: 0.1, Modality.VIDEO: 0.2})
    assert MeasuredProfile.from_json(json.loads(json.dumps(profile.to_json()))) == profile
    deployment = profile.deployment()
    assert deployment.aging_time_scale == 2.5
    for name in ("rps", "static"):  # every policy of the plug-in's own that orders by class
        served = as_served(policy_variant(name), deployment).scheduling
        assert served.chunk_cap_tokens == 256
        assert served.decode_hold_s == 0.125 and served.decode_hold_media_only
    for stock in ("fcfs", "vllm-priority"):  # vLLM's own scheduler: no cap, no hold
        served = as_served(policy_variant(stock), deployment).scheduling
        assert served.chunk_cap_tokens == 0 and served.decode_hold_s == 0
    timing = deployment.timing(1)
    assert timing.decode_step_s == 0.004 and timing.kv_token_s == 5e-7
    assert deployment.engine_config(1).kv_capacity_tokens == 200_000
    with pytest.raises(ValueError, match="not a measured profile"):
        MeasuredProfile.from_json({"format": "something else"})


@pytest.mark.slow
def test_simulate_replays_a_trace_file_on_a_measured_profile(tmp_path: Path) -> None:
    profile_file = tmp_path / "measured.json"
    profile_file.write_text(json.dumps(_profile({m: 0.02 for m in Modality}).to_json()))
    trace = generate_trace(mix_by_name("mixed-iii"), 3.0, 80, seed=4)
    # Token counts of the served model: short prompts, fixed-size media.
    served = Trace(trace.arrival_s, trace.kind, np.minimum(trace.prompt_tokens, 3000),
                   np.minimum(trace.modality_tokens, 2500), np.minimum(trace.output_tokens, 32))  # fmt: skip
    trace_file = tmp_path / "trace.jsonl"
    write_trace(trace_file, served)
    out = tmp_path / "sim.json"
    argv = ["simulate", "--measured", str(profile_file), "--trace", str(trace_file), "--policies", "fcfs,rps",
            "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["config"]["trace"] == str(trace_file)
    assert report["config"]["max_num_batched_tokens"] == 2048
    for result in report["results"].values():
        assert result["completed"] == len(served)
        counts = {m.value: int((served.modality == m.index).sum()) for m in Modality}
        assert {m: result["by_modality"][m]["count"] for m in counts} == counts
    assert main(["simulate", "--measured", str(profile_file), "--json", str(out)]) == 2  # no rate, no trace


def test_loaded_steps_replace_the_isolated_step_terms_and_keep_the_encoder() -> None:
    loaded = LoadedSteps(step_s=0.005, chunk_token_s=1.5e-4, decode_request_s=0.0, kv_token_s=8.5e-7)
    profile = replace(_profile({m: 0.0 for m in Modality}), loaded_steps=loaded)
    assert MeasuredProfile.from_json(json.loads(json.dumps(profile.to_json()))) == profile
    isolated, timing = (
        _profile({m: 0.0 for m in Modality}).deployment().timing(1),
        profile.deployment().timing(1),
    )
    assert timing.encoder == isolated.encoder
    # A step of 100 chunk tokens and 10 decodes reading 20,000 KV tokens, as the loaded fit charges it.
    assert timing.step_s(100, 10, 20_000, 0.0) == pytest.approx(0.005 + 100 * 1.5e-4 + 20_000 * 8.5e-7)
