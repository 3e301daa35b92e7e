"""One real tritonserver holding an engine per policy, each behind its own ensemble (what `rps-serve
demo --one-server` serves): each ensemble reaches its own engine, which runs its own policy and writes
its own run log, and the repository's own engine is not loaded."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rps_harness.loadtest.run_analysis import read_run_log
from rps_harness.local.repository import engine_model, ensemble_model
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.run_log import MODEL_PLACEHOLDER
from rps_serve.triton.settings import RUN_LOG_ENV
from tests.e2e.triton.conftest import Requests, Server, metrics, run, start_server

POLICIES = ("fcfs", "rps")


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


def test_each_ensemble_reaches_its_own_engine(server: Server, requests: Requests, run_logs: Path) -> None:
    assert not _ready(server, p.VLLM_MODEL) and not _ready(server, p.ENSEMBLE)
    sent = {"fcfs": 1, "rps": 2}
    for policy, count in sent.items():
        assert _ready(server, engine_model(policy)) and _ready(server, ensemble_model(policy))
        for _ in range(count):
            result = run(server, ensemble_model(policy), requests.make(Modality.IMAGE, max_tokens=4))
            assert result.error is None, (policy, result.error)
    now = metrics(server)
    for policy, count in sent.items():
        assert now.total("rps_requests_total", model=engine_model(policy)) == count
    deadline = time.monotonic() + 10  # a log is flushed with the loop's next lag sample
    while any(_logged_requests(run_logs, policy) < count for policy, count in sent.items()):
        assert time.monotonic() < deadline, {policy: _logged_requests(run_logs, policy) for policy in sent}
        time.sleep(0.2)
    assert all(_logged_requests(run_logs, policy) == count for policy, count in sent.items())


def test_each_engine_runs_its_own_policy(server: Server) -> None:
    # local_server's log, in the directory above the repository copy's.
    log = (server.repository.parent.parent / "tritonserver.log").read_text(errors="replace")
    started = [line for line in log.splitlines() if "front-end workers" in line]
    for policy in POLICIES:
        assert any(f"{engine_model(policy)}: " in line and f"policy {policy}," in line for line in started)
