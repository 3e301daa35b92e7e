"""`rps-serve bench` and perf_analyzer against a real tritonserver running the repository."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from rps_harness.cli import main
from rps_harness.loadtest.genai_perf import GenAIPerfRun, genai_perf_executable, run_genai_perf
from rps_harness.loadtest.perf_analyzer import PerfRun, ensure_perf_analyzer, run_perf_analyzer
from rps_harness.loadtest.perf_inputs import perf_input_files
from rps_harness.local.checkout import GENAI_PERF_VENV
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace, write_trace
from rps_serve.requests import Modality, RequestClass
from rps_serve.triton import protocol as p
from tests.checkout import CHECKOUT
from tests.e2e.triton.conftest import Server
from tests.hardware import HAS_NVIDIA_DRIVER

STATS = {"mean", "p50", "p90", "p95", "p99"}
METRICS = {"ttft", "tpot", "e2e", "norm_latency"}
KINDS = list(RequestKind)


def _trace() -> Trace:
    kinds = [RequestKind.SHORT_TEXT, RequestKind.IMAGE, RequestKind.LONG_TEXT, RequestKind.VIDEO,
             RequestKind.SHORT_TEXT, RequestKind.IMAGE]  # fmt: skip
    return Trace(
        arrival_s=np.arange(len(kinds)) * 0.2,
        kind=np.array([KINDS.index(k) for k in kinds]),
        prompt_tokens=np.array([60, 2000, 1400, 3200, 30, 1500]),
        modality_tokens=np.array([0, 1458, 0, 3136, 0, 1458]),
        output_tokens=np.array([5, 9, 3, 4, 7, 2]),
    )


def test_bench_measures_a_trace_in_the_simulators_json_shape(server: Server, tmp_path: Path) -> None:
    trace = _trace()
    trace_file, out, plot = tmp_path / "trace.jsonl", tmp_path / "bench.json", tmp_path / "ttft.png"
    write_trace(trace_file, trace)
    argv = ["bench", "--url", server.endpoints.grpc_url, "--trace", str(trace_file),
            "--model", str(server.model), "--isolated", "1", "--max-text-tokens", "300",
            "--label", "fcfs-or-rps", "--json", str(out), "--plot", str(plot), "--no-progress",
            "--metrics-url", server.endpoints.metrics_url]  # fmt: skip
    assert main(argv) == 0
    report = json.loads(out.read_text())
    (result,) = report["results"].values()
    assert list(report["results"]) == ["fcfs-or-rps"]
    for group in [result["overall"], *result["by_modality"].values(), *result["by_class"].values()]:
        assert set(group) == METRICS | {"count"}
        assert all(set(group[m]) == STATS for m in METRICS)
    assert result["completed"] == len(trace)
    assert result["requests"] == {
        "sent": len(trace),
        "completed": len(trace),
        "refused": 0,
        "failed": 0,
        "lost": 0,
    }
    assert result["overall"]["count"] == len(trace)
    # Where each class waited on the server: the trace's requests, each split into its stages.
    stages = result["stages"]
    assert sum(s["requests"] for s in stages.values()) == len(trace)
    for s in stages.values():
        if s["requests"]:
            assert s["front_end_queue_s"] >= 0 and s["front_end_work_s"] > 0
            assert s["front_end_queue_s"] + s["front_end_work_s"] < s["to_first_token_s"]
    counts = {m.value: int((trace.modality == m.index).sum()) for m in Modality}
    assert {m: result["by_modality"][m]["count"] for m in counts} == counts
    # Classes come from the server's rps_class output: every request has one of the three.
    assert sum(result["by_class"][c.label]["count"] for c in RequestClass) == len(trace)
    assert 0 < result["overall"]["ttft"]["mean"] <= result["overall"]["e2e"]["mean"]
    # SLOs from one isolated request per modality, at the four scales; violations can only fall.
    slo = result["slo"]
    assert set(slo) == {"ttft_slo_s", "1x", "2x", "3x", "4x"}
    assert all(v > 0 for v in slo["ttft_slo_s"].values())
    rates = [slo[f"{k}x"]["violation_rate"] for k in (1, 2, 3, 4)]
    assert rates == sorted(rates, reverse=True)
    isolated = report["config"]["isolated_runs"]
    assert {m: len(isolated[m]["ttft_s"]) for m in counts} == {m: 1 for m in counts}
    # No NVML on a CPU machine: utilization is null and says why; with a GPU it is a fraction.
    if HAS_NVIDIA_DRIVER:
        assert result["gpu"]["unavailable"] is None and 0.0 <= result["utilization"] <= 1.0
    else:
        assert result["gpu"]["unavailable"] and result["utilization"] is None
    assert plot.stat().st_size > 0


def test_bench_takes_slos_from_a_file(server: Server, tmp_path: Path) -> None:
    trace = _trace()
    rows = trace.kind == KINDS.index(RequestKind.SHORT_TEXT)  # text only: quick
    columns = (trace.arrival_s, trace.kind, trace.prompt_tokens, trace.modality_tokens, trace.output_tokens)
    write_trace(tmp_path / "trace.jsonl", Trace(*(c[rows] for c in columns)))
    slo_file = tmp_path / "slo.json"
    slo_file.write_text(json.dumps({"text": 1e-6, "image": 1.0, "video": 1.0}))  # no request can meet it
    out = tmp_path / "bench.json"
    argv = ["bench", "--url", server.endpoints.grpc_url, "--trace", str(tmp_path / "trace.jsonl"), "--model",
            str(server.model), "--json", str(out), "--no-progress"]  # fmt: skip
    assert main([*argv, "--slo", str(slo_file)]) == 0
    result = json.loads(out.read_text())["results"]["server"]
    assert result["slo"]["ttft_slo_s"]["text"] == 1e-6
    assert result["slo"]["4x"]["violation_rate"] == 1.0 and result["slo"]["4x"]["goodput_rps"] == 0.0
    bad = tmp_path / "bad.json"
    bad.write_text('{"text": 1}')
    assert main([*argv, "--slo", str(bad)]) == 2


def test_perf_analyzer_runs_on_the_ensemble(server: Server, tmp_path: Path) -> None:
    """The real binary (from the tritonclient 2.51 wheel, fetched once into build/) on text requests."""
    # From the tritonclient 2.51 wheel on PyPI, which the set-up needs anyway: no registry is a failure.
    binary = ensure_perf_analyzer(CHECKOUT / "build" / "perf_analyzer")
    served = RequestFormat.of_model(server.model)
    files = perf_input_files(tmp_path / "inputs", served, per_modality=2, seed=0, max_tokens=4)
    run = PerfRun(server.endpoints.grpc_url, "rps_ensemble", files[Modality.TEXT], tmp_path / "text.csv",
                  concurrency="1", measurement_ms=2000, max_trials=5)  # fmt: skip
    rows = run_perf_analyzer(binary, run, tmp_path / "perf.log", timeout_s=300)
    assert [row["Concurrency"] for row in rows] == ["1"]
    assert float(rows[0]["Inferences/Second"]) > 0
    assert int(rows[0]["p50 latency"]) > 0


def _ensemble_requests(server: Server) -> dict[str, int]:
    """Triton's own count of the ensemble's successful and failed requests (its statistics API)."""
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    try:
        stats = client.get_inference_statistics(p.ENSEMBLE, as_json=True)["model_stats"][0]["inference_stats"]
    finally:
        client.close()
    return {kind: int(stats[kind].get("count", 0)) for kind in ("success", "fail")}


def test_genai_perf_profiles_the_ensemble_over_grpc_streaming(server: Server, tmp_path: Path) -> None:
    """NVIDIA's GenAI-Perf as a vllm_backend user runs it (KServe gRPC streaming, synthetic text,
    `{"max_tokens": "8"}`): every request answered, no error from it, perf_analyzer or the server."""
    # Its own venv, which `make test` makes first: a missing one fails here, saying how to make it.
    executable = genai_perf_executable(CHECKOUT / GENAI_PERF_VENV)
    binary = ensure_perf_analyzer(CHECKOUT / "build" / "perf_analyzer")
    run = GenAIPerfRun(server.endpoints.grpc_url, p.ENSEMBLE, server.model, tmp_path / "artifacts",
                       concurrency=2, requests=24, output_tokens=8)  # fmt: skip
    before = _ensemble_requests(server)
    result = run_genai_perf(executable, binary, run, tmp_path / "genai-perf.log", timeout_s=420)
    after = _ensemble_requests(server)
    assert result.errors == []
    assert result.requests == result.recorded == run.requests
    assert result.unanswered == 0
    # A run repeated because perf_analyzer left its export empty sent its requests too.
    sent = run.requests * result.runs
    assert {kind: after[kind] - before[kind] for kind in after} == {"success": sent, "fail": 0}
    # One streamed response a token: the string "8" was read as max_tokens (vLLM's default is 16).
    assert max(result.responses) <= run.output_tokens
    assert 0 < result.stats["time_to_first_token"]["avg"] <= result.stats["request_latency"]["avg"]
