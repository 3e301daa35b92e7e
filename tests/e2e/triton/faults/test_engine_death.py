"""The vLLM engine, serving the shipped policy, dies under streaming load (its engine-core process,
then a worker, SIGKILLed): every stream in flight ends with an error naming it, new requests are
refused as retryable until the engine is back, and the same server, engine restarted in place, serves
text, image and video again. Meanwhile the deployment's readiness probe fails and its liveness probe
passes: the replica recovers by itself."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.engine_supervisor import EngineState
from tests.e2e.triton.conftest import (
    ENSEMBLE,
    MODELS,
    VLLM_MODEL,
    Requests,
    Server,
    metrics,
    run,
)
from tests.e2e.triton.faults.conftest import (
    END_BOUND_S,
    ENGINE_CORE,
    ENGINE_START_S,
    WORKER,
    alive,
    engine_state,
    fault_server,
    long_texts,
    probe,
    start_streams,
    state_within,
    status,
    titled,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with fault_server(tmp_path_factory) as running:
        yield running


def _engine_up(server: Server) -> float:
    return metrics(server).total("rps_engine_up", model=VLLM_MODEL)


def _restarts(server: Server) -> float:
    return metrics(server).total("rps_engine_restarts_total", model=VLLM_MODEL)


def _engine_down_within(server: Server, bound_s: float) -> bool:
    """Whether the model reports its engine down within `bound_s` (it polls the engine every second)."""
    deadline = time.monotonic() + bound_s
    while _engine_up(server) != 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _serves_again(server: Server, requests: Requests, deadline: float) -> None:
    """Wait for a text to be served, then serve every modality through both models."""
    while True:
        result = run(server, ENSEMBLE, requests.make(Modality.TEXT, max_tokens=4), timeout_s=60)
        if result.error is None:
            break
        assert p.is_retryable(result.error), result.error
        assert time.monotonic() < deadline, f"not serving again: {result.error}"
        time.sleep(1.0)
    for modality in Modality:
        for model in MODELS:
            result = run(server, model, requests.make(modality, max_tokens=4), timeout_s=120)
            assert result.error is None, (modality, model, result.error)
            assert result.text


@pytest.mark.parametrize("victim", [ENGINE_CORE, WORKER])
def test_engine_process_killed_under_load(server: Server, victim: str) -> None:
    assert server.endpoints.pid is not None
    # Serving, whatever an earlier test left restarting (its failure is its own, not this one's).
    assert state_within(server, EngineState.SERVING, ENGINE_START_S), engine_state(server)
    requests = Requests(seed=len(victim))
    restarts = _restarts(server)
    assert probe(server, "ready") == 0 and probe(server, "live") == 0
    [target] = titled(server.endpoints.pid, victim)
    engine = titled(server.endpoints.pid, ENGINE_CORE) + titled(server.endpoints.pid, WORKER)
    client = start_streams(server, long_texts(server, 6, seed=len(victim)))
    try:
        client.assert_open()
        os.kill(target.pid, signal.SIGKILL)
        killed = time.monotonic()
        tally = client.wait_all(killed + END_BOUND_S)
        assert tally.lost == 0, f"streams still open {END_BOUND_S:.0f} s after the kill: {tally}"
        # Every stream ended with an error of its own (none could reach its end: `assert_open`),
        # saying the engine is restarting: a client knows to retry.
        assert not client.unattributed_errors, client.unattributed_errors
        for request_id, result in client.results.items():
            assert result.error is not None, f"{request_id} finished after its engine was killed"
            assert f'"{request_id}"' in result.error and p.RESTARTING in result.error, result.error
    finally:
        client.close(cancel_requests=True)  # a failed check leaves streams open
    # While the new engine starts: refused as retryable, and the engine reported down.
    refused = run(server, ENSEMBLE, requests.make(Modality.TEXT, max_tokens=4), timeout_s=60)
    assert refused.error is not None and p.RESTARTING in refused.error, refused.error
    assert _engine_down_within(server, 5.0)
    # Not ready (the Service sends requests elsewhere), yet live: the engine is back within its deadline.
    assert engine_state(server) is EngineState.RESTARTING
    assert probe(server, "ready") == 1 and probe(server, "live") == 0
    _serves_again(server, requests, deadline=killed + ENGINE_START_S + END_BOUND_S)
    assert _restarts(server) == restarts + 1
    assert _engine_up(server) == 1
    assert status(server, f"/v2/models/{VLLM_MODEL}/ready") == 200
    assert probe(server, "ready") == 0 and probe(server, "live") == 0
    # The dead engine's processes are gone; the new engine's are the server's.
    assert not alive(engine), [process.pid for process in alive(engine)]
    assert len(titled(server.endpoints.pid, ENGINE_CORE)) == 1
