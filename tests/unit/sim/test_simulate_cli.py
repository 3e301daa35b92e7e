"""`rps-serve simulate` and `rps-serve trace`: the JSON contract, and the deployment layouts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rps_harness.cli import main
from rps_harness.sim.run import (
    SimulationConfig,
    SimulationSetup,
    default_shapes,
    device_profile,
    prepare,
    run_policy,
)
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.source import SyntheticWorkload
from rps_harness.workload.synthetic_profile import reference_profile, with_slower_images
from rps_harness.workload.trace import Trace, read_trace
from rps_serve.profiles.records import write_records
from rps_serve.requests import Modality

# `rps-serve simulate` end to end: seconds a test (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow

STATS = {"mean", "p50", "p90", "p95", "p99"}
METRICS = {"ttft", "tpot", "e2e", "norm_latency"}


def _check_m(m: dict[str, dict[str, float | None]]) -> None:
    assert set(m) >= METRICS
    for name in METRICS:
        assert set(m[name]) == STATS


def test_simulate_writes_the_documented_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim.json"
    plot = tmp_path / "ttft.png"
    argv = [
        "simulate", "--reference", "llava-onevision-qwen2-7b", "--gpus", "1", "--mix", "mixed-iii",
        "--rate", "4", "--requests", "150", "--seed", "1", "--policies", "fcfs,rps,modserve-rps",
        "--json", str(out), "--plot", str(plot),
    ]  # fmt: skip
    assert main([*argv[:4], "2", *argv[5:]]) == 0  # modserve needs 2 GPUs
    report = json.loads(out.read_text())
    assert report["config"]["rate"] == 4 and report["config"]["requests"] == 150
    assert report["config"]["shapes"] == "serving"  # the default for a LLaVA-OneVision profile
    assert set(report["results"]) == {"fcfs", "rps", "modserve-rps"}
    for result in report["results"].values():
        _check_m(result["overall"])
        assert set(result["by_modality"]) == {"text", "image", "video"}
        assert set(result["by_class"]) == {"sand", "pebbles", "rocks"}
        for m in [*result["by_modality"].values(), *result["by_class"].values()]:
            _check_m(m)
        assert 0.0 < result["utilization"] <= 1.0
        assert result["completed"] == 150
        assert isinstance(result["preemptions"], int)
        assert set(result["slo"]) >= {"1x", "2x", "3x", "4x"}
        steady = result["steady_state"]
        start, end = steady["window_s"]
        assert 0 <= start < end and 0 < steady["overall"]["count"] < 150
        _check_m(steady["overall"])
        assert set(steady["slo"]) >= {"1x", "2x", "3x", "4x"}
    assert plot.stat().st_size > 0
    assert "rps" in capsys.readouterr().out


def test_simulate_rejects_unknown_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "simulate",
        "--rate",
        "2",
        "--requests",
        "10",
        "--policies",
        "lifo",
        "--json",
        str(tmp_path / "x"),
    ]
    assert main(argv) == 2
    assert "unknown policy 'lifo'" in capsys.readouterr().err


def test_trace_command_writes_a_replayable_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    assert main(["trace", "--mix", "mixed-v", "--rate", "3", "--requests", "50", "--out", str(out)]) == 0
    trace = read_trace(out)
    assert len(trace) == 50 and np.all(np.diff(trace.arrival_s) >= 0)


def test_simulate_plots_a_trace_file(tmp_path: Path) -> None:
    trace_file, out, plot = tmp_path / "trace.jsonl", tmp_path / "sim.json", tmp_path / "ttft.png"
    assert main(["trace", "--rate", "3", "--requests", "40", "--seed", "2", "--out", str(trace_file)]) == 0
    argv = ["simulate", "--trace", str(trace_file), "--json", str(out), "--plot", str(plot)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["config"]["trace"] == str(trace_file) and "rate" not in report["config"]
    assert report["results"]["fcfs"]["completed"] == 40
    assert plot.stat().st_size > 0


@pytest.mark.parametrize(
    "synthetic", [["--rate", "2"], ["--mix", "mixed-v"], ["--requests", "9"], ["--shapes", "serving"]]
)
def test_a_trace_and_a_synthetic_workload_are_refused_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synthetic: list[str]
) -> None:
    trace_file, out = tmp_path / "trace.jsonl", tmp_path / "sim.json"
    assert main(["trace", "--rate", "3", "--requests", "20", "--out", str(trace_file)]) == 0
    assert main(["simulate", "--trace", str(trace_file), *synthetic, "--json", str(out)]) == 2
    assert f"--trace replaces {synthetic[0]}" in capsys.readouterr().err
    assert not out.exists()


def test_modserve_moves_encoding_off_the_llm_gpus() -> None:
    setup = prepare(
        SimulationConfig("llava-onevision-qwen2-7b", gpus=2, workload=SyntheticWorkload("mixed-v", 2.0, 120))
    )
    colocated = run_policy(setup, "fcfs")
    modserve = run_policy(setup, "modserve")
    assert colocated.records.completed.all() and modserve.records.completed.all()
    # The same work on one LLM GPU instead of two, while encoder GPUs sit mostly idle.
    assert modserve.utilization < colocated.utilization


def test_modserve_needs_two_gpus() -> None:
    setup = prepare(
        SimulationConfig("llava-onevision-qwen2-7b", gpus=1, workload=SyntheticWorkload("mixed-v", 2.0, 10))
    )
    with pytest.raises(ValueError, match="at least 2 GPUs"):
        run_policy(setup, "modserve")


def test_a_profile_file_sets_the_lines_and_the_reference_the_sizes(tmp_path: Path) -> None:
    reference = "llava-onevision-qwen2-7b"
    profile = tmp_path / "slow-images.jsonl"
    write_records(profile, with_slower_images(reference_profile(reference, per_kind=60), 20.0))
    workload = SyntheticWorkload("mixed-iii", 2.0, 10)
    published = device_profile(SimulationConfig(reference, 1, workload))[0]
    fitted = device_profile(SimulationConfig(reference, 1, workload, profile=profile))[0]
    assert fitted.spec == published.spec  # weights and KV bytes per token: the reference's
    image, text = Modality.IMAGE, Modality.TEXT
    assert fitted.lines[image].slope > 10 * published.lines[image].slope
    assert fitted.lines[text].slope == pytest.approx(published.lines[text].slope, rel=0.2)
    assert default_shapes(reference) == "serving" and default_shapes(reference, profile) == "isolation"


def test_a_profile_file_and_a_measured_stack_are_one_device_too_many(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = ["--profile", str(tmp_path / "p.jsonl"), "--measured", str(tmp_path / "m.json")]
    argv = ["simulate", *both, "--rate", "1", "--requests", "10", "--json", str(tmp_path / "out.json")]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(ValueError, match="give one"):
        SimulationConfig(
            "x", 1, SyntheticWorkload("mixed-iii", 1.0, 1), profile=Path("p"), measured=Path("m")
        )


def test_a_smaller_kv_cache_is_what_the_engine_gets_and_it_preempts(tmp_path: Path) -> None:
    base = ["simulate", "--reference", "llava-onevision-qwen2-7b", "--mix", "mixed-v", "--rate", "6"]
    argv = [*base, "--requests", "150", "--policies", "fcfs,vllm-priority,modality-priority,rps"]
    roomy, tight = tmp_path / "roomy.json", tmp_path / "tight.json"
    assert main([*argv, "--json", str(roomy)]) == 0
    assert main([*argv, "--kv-capacity-tokens", "16384", "--json", str(tight)]) == 0
    reports = json.loads(roomy.read_text()), json.loads(tight.read_text())
    assert reports[1]["config"]["kv_capacity_tokens"] == 16384 < reports[0]["config"]["kv_capacity_tokens"]
    for policy in reports[0]["results"]:
        runs = [report["results"][policy] for report in reports]
        assert [run["completed"] for run in runs] == [150, 150]
        assert runs[1]["preemptions"] > runs[0]["preemptions"]
    with pytest.raises(ValueError, match="some tokens"):
        SimulationConfig("x", 1, SyntheticWorkload("mixed-iii", 1.0, 1), kv_capacity_tokens=0)


def _queued_text_and_image(policy: str) -> np.ndarray:
    """First tokens of a long text classed rocks and an image classed sand, both queued behind a long
    text that fills a step: the order the policy gives them."""
    kinds = [RequestKind.LONG_TEXT, RequestKind.IMAGE, RequestKind.LONG_TEXT]
    trace = Trace(
        arrival_s=np.array([0.0, 0.001, 0.002]),
        kind=np.array([list(RequestKind).index(k) for k in kinds]),
        prompt_tokens=np.array([8192, 3000, 8000]),
        modality_tokens=np.array([0, 2916, 0]),
        output_tokens=np.array([2, 2, 2]),
    )
    config = SimulationConfig("llava-onevision-qwen2-7b", 1, SyntheticWorkload("mixed-iii", 1.0, 1))
    deployment, _ = device_profile(config)
    setup = SimulationSetup(deployment, trace, np.array([0, 0, 2]), trace.modality, num_levels=3)
    return run_policy(setup, policy).records.first_token_s


def test_stock_priority_orders_by_class_and_by_modality_as_configured() -> None:
    # vllm-priority: the class is the priority, so the sand image goes before the rock text;
    # modality-priority: text before image, whatever the classes say.
    by_class = _queued_text_and_image("vllm-priority")
    by_modality = _queued_text_and_image("modality-priority")
    assert by_class[1] < by_class[2]
    assert by_modality[2] < by_modality[1]


def test_rps_no_evict_lets_sand_wait_where_rps_evicts_the_rock() -> None:
    # A rock text decodes in a cache that has no room for the sand text arriving a second later.
    kinds = [RequestKind.LONG_TEXT, RequestKind.SHORT_TEXT]
    trace = Trace(
        arrival_s=np.array([0.0, 1.0]),
        kind=np.array([list(RequestKind).index(k) for k in kinds]),
        prompt_tokens=np.array([7800, 400]),
        modality_tokens=np.array([0, 0]),
        output_tokens=np.array([400, 2]),
    )
    config = SimulationConfig(
        "llava-onevision-qwen2-7b", 1, SyntheticWorkload("mixed-iii", 1.0, 1), kv_capacity_tokens=8208
    )
    deployment, _ = device_profile(config)
    setup = SimulationSetup(deployment, trace, np.array([2, 0]), trace.modality, num_levels=3)
    evicting, waiting = run_policy(setup, "rps"), run_policy(setup, "rps-no-evict")
    assert evicting.preemptions == 1 and waiting.preemptions == 0
    assert evicting.records.first_token_s[1] < evicting.records.finish_s[0]
    assert waiting.records.first_token_s[1] > waiting.records.finish_s[0]
