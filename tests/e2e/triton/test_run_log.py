"""The run log of a real server (`RPS_RUN_LOG`), here under the modality-priority baseline with vLLM's
own front end: every engine step with its tokens and time, the loop's lag, and each request's stages
to its first token, vLLM's input processing among them; read back by the demo's analysis."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rps_harness.loadtest.run_analysis import STAGES, read_run_log, summarize
from rps_serve.requests import Modality
from rps_serve.triton.settings import POLICY_ENV, RUN_LOG_ENV
from tests.e2e.triton.conftest import ENSEMBLE, Requests, Server, run, start_server


@pytest.fixture(scope="module")
def run_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run-log") / "run.jsonl"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, run_log: Path) -> Iterator[Server]:
    env = {POLICY_ENV: "modality-priority", RUN_LOG_ENV: str(run_log)}
    with start_server(tmp_path_factory, env=env) as running:
        yield running


def test_the_run_log_records_steps_lag_and_every_requests_stages(
    server: Server, requests: Requests, run_log: Path
) -> None:
    start = time.monotonic()
    for modality in Modality:
        result = run(server, ENSEMBLE, requests.make(modality, max_tokens=4))
        assert result.error is None, (modality, result.error)
    end = time.monotonic()
    time.sleep(0.5)  # the server flushes its log with every lag sample, every 0.1 s
    summary = summarize(run_log, start, end)
    engine = summary["engine"]
    assert engine["steps"] >= 3 * 4 and engine["prefill_share"] > 0 and engine["busy"] > 0
    assert summary["loop_lag_s"]["max"] >= 0
    requests_seen = [
        r for r in read_run_log(run_log) if r["kind"] == "request" and start <= r["arrival"] <= end
    ]
    assert len(requests_seen) == len(Modality)
    for record in requests_seen:
        assert all(record[s] >= 0 and math.isfinite(record[s]) for s in STAGES), record
        assert record["to_first_token_s"] >= sum(record[s] for s in STAGES) - 1e-3
        # vLLM renders under modality-priority, so its input processing is there to see.
        assert record["vllm_input_s"] > 0
