"""GenAI-Perf's command as a vllm_backend user writes it, and a run judged from its exports and log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rps_harness.loadtest.genai_perf import (
    EXPORT_TRIES,
    REQUESTS_EXPORT,
    STATS_EXPORT,
    GenAIPerfRun,
    genai_perf_executable,
    read_exports,
    run_genai_perf,
)

RUN = GenAIPerfRun("127.0.0.1:8001", "rps_ensemble", Path("model"), Path("out"), concurrency=2, requests=3)


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_command_profiles_kserve_grpc_streaming_with_vllms_inputs() -> None:
    command = RUN.command(Path("venv/bin/genai-perf"))
    assert command[:2] == ["venv/bin/genai-perf", "profile"]
    assert {"--streaming", "--output-tokens-mean-deterministic"} <= set(command)
    expected = {"-m": "rps_ensemble", "--backend": "vllm", "--endpoint-type": "kserve",
                "-u": "127.0.0.1:8001", "--concurrency": "2", "--request-count": "3",
                "--output-tokens-mean": "8"}  # fmt: skip
    assert {name: _flag(command, name) for name in expected} == expected


def _write_run(directory: Path, responses: list[int], log: str) -> Path:
    export = directory / "rps_ensemble-triton-vllm-concurrency2"
    export.mkdir(parents=True)
    stats = {
        "request_count": {"unit": "count", "avg": float(len(responses))},
        "request_throughput": {"unit": "requests/sec", "avg": 2.5},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 20.0},
        **{
            metric: {"unit": "ms", "avg": 10.0, "p50": 9.0, "p90": 12.0, "p99": 13.0}
            for metric in ("time_to_first_token", "inter_token_latency", "request_latency")
        },
        "input_config": {"model_names": ["rps_ensemble"]},
    }
    (export / STATS_EXPORT).write_text(json.dumps(stats))
    requests = [
        {"timestamp": i, "request_inputs": {}, "response_timestamps": list(range(n)), "response_outputs": []}
        for i, n in enumerate(responses)
    ]
    (export / REQUESTS_EXPORT).write_text(json.dumps({"experiments": [{"requests": requests}]}))
    (directory / "genai-perf.log").write_text(log)
    return directory / "genai-perf.log"


def test_a_clean_run_counts_its_requests(tmp_path: Path) -> None:
    log = _write_run(tmp_path, [3, 3, 2], "Running Perf Analyzer : 'perf_analyzer -m rps_ensemble'\n")
    result = read_exports(tmp_path, log)
    assert (result.requests, result.recorded, result.unanswered, result.errors) == (3, 3, 0, [])
    assert "input_config" not in result.stats
    summary = result.summary()
    assert summary["time_to_first_token_ms"] == {"avg": 10.0, "p50": 9.0, "p90": 12.0, "p99": 13.0}
    assert summary["requests_per_s"] == 2.5


def test_errors_and_unanswered_requests_are_found(tmp_path: Path) -> None:
    log = _write_run(tmp_path, [3, 0], "ok\nThread [0] had error: in ensemble 'rps_ensemble', bad request\n")
    result = read_exports(tmp_path, log)
    assert (result.responses, result.unanswered) == ([3, 0], 1)
    assert result.errors == ["Thread [0] had error: in ensemble 'rps_ensemble', bad request"]


def test_a_missing_install_says_how_to_make_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="make setup-genai-perf"):
        genai_perf_executable(tmp_path / "venv-genai-perf")


# A stand-in for the `genai-perf` command (the e2e test runs the real one): each call takes the next
# outcome from `plan` — "clean" writes a run's exports and exits 0, "empty" leaves perf_analyzer's
# requests export empty as 2.51 does and exits 1, "fail" exits 1 with the exports intact.
_FAKE_GENAI_PERF = """#!{python}
import json, sys
from pathlib import Path
plan = Path({plan!r})
outcome, *rest = plan.read_text().split()
plan.write_text(" ".join(rest))
export = Path(sys.argv[sys.argv.index("--artifact-dir") + 1]) / "rps_ensemble-triton-vllm-concurrency2"
export.mkdir(parents=True, exist_ok=True)
stats = {{"request_count": {{"avg": 1.0}}, "request_throughput": {{"avg": 1.0}},
         "output_token_throughput": {{"avg": 8.0}}}}
(export / {stats!r}).write_text(json.dumps(stats))
requests = [{{"timestamp": 0, "response_timestamps": [1, 2], "response_outputs": []}}]
body = "" if outcome == "empty" else json.dumps({{"experiments": [{{"requests": requests}}]}})
(export / {requests!r}).write_text(body)
print("Loading response data from", export)
sys.exit(0 if outcome == "clean" else 1)
"""


def _run_fake(tmp_path: Path, outcomes: list[str]) -> tuple[Path, Path]:
    plan, executable = tmp_path / "plan", tmp_path / "genai-perf"
    plan.write_text(" ".join(outcomes))
    script = _FAKE_GENAI_PERF.format(
        python=sys.executable, plan=str(plan), stats=STATS_EXPORT, requests=REQUESTS_EXPORT
    )
    executable.write_text(script)
    executable.chmod(0o755)
    return executable, plan


def test_a_run_whose_requests_export_perf_analyzer_left_empty_runs_again(tmp_path: Path) -> None:
    executable, plan = _run_fake(tmp_path, ["empty", "clean"])
    run = GenAIPerfRun("url", "rps_ensemble", Path("model"), tmp_path / "artifacts")
    result = run_genai_perf(executable, tmp_path / "perf_analyzer", run, tmp_path / "genai-perf.log")
    assert (result.runs, result.recorded, plan.read_text()) == (2, 1, "")
    assert (tmp_path / "genai-perf.run1.log").read_text().startswith("Loading response data")


def test_any_other_failure_is_not_run_again(tmp_path: Path) -> None:
    executable, plan = _run_fake(tmp_path, ["fail", "clean"])
    run = GenAIPerfRun("url", "rps_ensemble", Path("model"), tmp_path / "artifacts")
    with pytest.raises(RuntimeError, match="exited with 1"):
        run_genai_perf(executable, tmp_path / "perf_analyzer", run, tmp_path / "genai-perf.log")
    assert plan.read_text() == "clean"


def test_empty_exports_stop_after_the_last_try(tmp_path: Path) -> None:
    executable, plan = _run_fake(tmp_path, ["empty"] * EXPORT_TRIES + ["clean"])
    run = GenAIPerfRun("url", "rps_ensemble", Path("model"), tmp_path / "artifacts")
    with pytest.raises(RuntimeError, match="exited with 1"):
        run_genai_perf(executable, tmp_path / "perf_analyzer", run, tmp_path / "genai-perf.log")
    assert plan.read_text() == "clean"
