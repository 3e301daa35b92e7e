"""One real tritonserver holding an engine per policy, each behind its own ensemble (what `rps-serve
demo --one-server` serves): each ensemble reaches its own engine, which runs its own policy and writes
its own run log, and the repository's own engine is not loaded. The run log (`RPS_RUN_LOG`) is the one
the benchmarks read: every engine step with its tokens and time, the loop's lag, and each request's
stages to its first token; under modality-priority, vLLM's own front end renders, so its input
processing is there to see."""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rps_harness.loadtest.run_analysis import STAGES, read_run_log, summarize
from rps_harness.local.repository import engine_model, ensemble_model
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.run_log import MODEL_PLACEHOLDER
from rps_serve.triton.settings import RUN_LOG_ENV
from tests.e2e.triton.conftest import Requests, Server, metrics, run, start_server

POLICIES = ("modality-priority", "rps")


@pytest.fixture(scope="module")
def run_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("run-logs")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, run_logs: Path) -> Iterator[Server]:
    env = {RUN_LOG_ENV: str(run_logs / f"{MODEL_PLACEHOLDER}.jsonl")}
    with start_server(tmp_path_factory, env=env, policies=POLICIES) as running:
        yield running


def _ready(server: Server, model: str) -> bool:
    url = f"http://{server.endpoints.http_url}/v2/models/{model}/ready"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return bool(reply.status == 200)
    except urllib.error.HTTPError:
        return False


def _logged_requests(run_logs: Path, policy: str) -> int:
    path = run_logs / f"{engine_model(policy)}.jsonl"
    return sum(1 for r in read_run_log(path) if r["kind"] == "request") if path.exists() else 0


def _counts(server: Server, run_logs: Path) -> dict[str, tuple[float, int]]:
    """Per policy: its engine's request counter and the requests its run log holds."""
    now = metrics(server)
    return {
        policy: (
            now.total("rps_requests_total", model=engine_model(policy)),
            _logged_requests(run_logs, policy),
        )
        for policy in POLICIES
    }


def test_each_ensemble_reaches_its_own_engine(server: Server, requests: Requests, run_logs: Path) -> None:
    assert not _ready(server, p.VLLM_MODEL) and not _ready(server, p.ENSEMBLE)
    before = _counts(server, run_logs)
    sent = dict(zip(POLICIES, (1, 2), strict=True))
    for policy, count in sent.items():
        assert _ready(server, engine_model(policy)) and _ready(server, ensemble_model(policy))
        for _ in range(count):
            result = run(server, ensemble_model(policy), requests.make(Modality.IMAGE, max_tokens=4))
            assert result.error is None, (policy, result.error)
    expected = {
        policy: (before[policy][0] + count, before[policy][1] + count) for policy, count in sent.items()
    }
    deadline = time.monotonic() + 10  # a log is flushed with the loop's next lag sample
    while (now := _counts(server, run_logs)) != expected:
        assert all(now[policy][0] == expected[policy][0] for policy in POLICIES), (now, expected)
        assert all(now[policy][1] <= expected[policy][1] for policy in POLICIES), (now, expected)
        assert time.monotonic() < deadline, (now, expected)
        time.sleep(0.2)


def test_each_engine_runs_its_own_policy(server: Server) -> None:
    # local_server's log, in the directory above the repository copy's.
    log = (server.repository.parent.parent / "tritonserver.log").read_text(errors="replace")
    started = [line for line in log.splitlines() if "front-end workers" in line]
    for policy in POLICIES:
        assert any(f"{engine_model(policy)}: " in line and f"policy {policy}," in line for line in started)


def test_the_run_log_records_steps_lag_and_every_requests_stages(
    server: Server, requests: Requests, run_logs: Path
) -> None:
    policy = "modality-priority"
    run_log = run_logs / f"{engine_model(policy)}.jsonl"
    start = time.monotonic()
    for modality in Modality:
        result = run(server, ensemble_model(policy), requests.make(modality, max_tokens=4))
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
    # Only the image and the video bring encoder inputs of their own.
    with_media = sorted(r["media_inputs"] > 0 for r in requests_seen)
    assert with_media == sorted(m is not Modality.TEXT for m in Modality)
    for record in requests_seen:
        assert all(record[s] >= 0 and math.isfinite(record[s]) for s in STAGES), record
        assert record["to_first_token_s"] >= sum(record[s] for s in STAGES) - 1e-3
        # vLLM renders under modality-priority, so its input processing is there to see.
        assert record["vllm_input_s"] > 0
