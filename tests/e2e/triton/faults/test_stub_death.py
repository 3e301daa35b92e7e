"""The `vllm_model` stub (serving the shipped policy, then a stock-vLLM baseline), then tritonserver
itself, SIGKILLed under streaming load: no vLLM engine process outlives them, our client ends the
streams Triton 2.51 leaves open, the deployment's probes fail at once after the stub, and a next server
(the shipped policy's) starts clean, serves, and reads not live while its engine stays down past its
restart deadline."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from rps_harness.client import StreamClient
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.triton import protocol as p
from rps_serve.triton.engine_supervisor import EngineState
from tests.e2e.triton.conftest import MODELS, VLLM_MODEL, Requests, Server, run
from tests.e2e.triton.faults.conftest import (
    END_BOUND_S,
    ENGINE_CORE,
    ENGINE_START_S,
    SHIPPED_POLICY,
    STUB,
    WORKER,
    alive,
    engine_state,
    fault_server,
    long_texts,
    probe,
    start_streams,
    state_within,
    titled,
    vllm_model_stub,
)

# The engine core polls its parent every 0.5 s; the stub notices a dead tritonserver within 0.3 s.
GONE_BOUND_S = 10.0
# Well above a healthy stream's silence on the tiny model, well below the bound.
SILENCE_S = 15.0
# An engine restart deadline no restart here meets (one takes 16 s or more), so that a restart shows the
# state past it; and how soon the engine reads overdue after its death (noticed within 1 s).
SHORT_DEADLINE_S = 1.0
OVERDUE_BOUND_S = 10.0
# Triton 2.51's Python backend sometimes aborts the whole server as a stub dies in the middle of a send
# (its own, without our code too: docs/limits-and-guarantees.md, "Triton's Python backend aborts when a
# stub dies mid-send"); its log then names this.
TRITON_ABORT = "boost::interprocess::lock_exception"


def _triton_aborted(server: Server, within_s: float = 10.0) -> bool:
    """Whether tritonserver ended within `within_s` with the Python backend's own abort in its log."""
    assert server.endpoints.pid is not None
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ended = psutil.Process(server.endpoints.pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            ended = True
        if ended:
            log = server.repository.parent / "tritonserver.log"
            return TRITON_ABORT in log.read_text(errors="replace")
        time.sleep(0.2)
    return False


def _engine_processes(server: Server) -> list[psutil.Process]:
    assert server.endpoints.pid is not None
    found = titled(server.endpoints.pid, ENGINE_CORE) + titled(server.endpoints.pid, WORKER)
    assert len(found) == 2, [process.cmdline() for process in found]
    return found


def _gone_within(processes: list[psutil.Process], bound_s: float) -> list[int]:
    """The pids of `processes` still running `bound_s` from now (at most)."""
    deadline = time.monotonic() + bound_s
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [process.pid for process in alive(processes)]


def _streams_end(client: StreamClient, since: float) -> None:
    """Every stream ends within the bound: with an error of its own (the server's, or ours after
    `SILENCE_S` without a word: Triton 2.51 sends nothing for a dead stub's requests)."""
    tally = client.wait_all(since + END_BOUND_S)
    assert tally.lost == 0, tally
    for request_id, result in client.results.items():
        assert result.error is not None and f'"{request_id}"' in result.error, (request_id, result.error)


def _serves(server: Server) -> None:
    requests = Requests(seed=7)
    for modality in Modality:
        for model in MODELS:
            result = run(server, model, requests.make(modality, max_tokens=4), timeout_s=120)
            assert result.error is None, (modality, model, result.error)


# The RPS engine core (the shipped policy's, as every policy of ours) follows its stub from a thread
# of its own; a stock-vLLM engine core (the baselines) has none, so the stub's watcher ends it.
@pytest.mark.parametrize("policy", [SHIPPED_POLICY, Policy.FCFS.value])
def test_stub_killed_under_load(tmp_path_factory: pytest.TempPathFactory, policy: str) -> None:
    with fault_server(tmp_path_factory, policy) as server:
        assert server.endpoints.pid is not None
        engine = _engine_processes(server)
        stub = vllm_model_stub(server)
        assert probe(server, "ready") == 0 and probe(server, "live") == 0
        client = start_streams(server, long_texts(server, 6, seed=11))
        client.silence_timeout_s = SILENCE_S
        try:
            client.assert_open()
            # A busy replica is not a failed one: both probes pass beside the six streams, still open.
            assert probe(server, "ready") == 0 and probe(server, "live") == 0
            client.assert_open()
            os.kill(stub.pid, signal.SIGKILL)
            killed = time.monotonic()
            # At once, not after a run of failures: the dead stub's streams hang until the server goes.
            state = str(engine_state(server))
            if "stub is not healthy" not in state and _triton_aborted(server):
                # Triton took the whole server down with the stub: what holds then is the
                # "tritonserver killed" row, checked here; the stub's own row cannot be.
                assert not _gone_within(engine, GONE_BOUND_S), "engine processes outlived tritonserver"
                _streams_end(client, killed)
                pytest.skip(f"tritonserver aborted at the stub's kill ({TRITON_ABORT}); its processes ended")
            assert "stub is not healthy" in state, state
            assert probe(server, "live") == 1 and probe(server, "ready") == 1
            assert not _gone_within(engine, GONE_BOUND_S), "engine processes outlived their stub"
            _streams_end(client, killed)
        finally:
            client.close(cancel_requests=True)  # a failed check leaves streams open
        # New requests are refused (Triton: the stub "is not healthy"), not left waiting.
        refused = run(server, VLLM_MODEL, Requests(seed=3).make(Modality.TEXT), timeout_s=60)
        assert refused.error is not None
        # Triton 2.51 still calls the model ready; the deployment's probes do not.
        assert probe(server, "live") == 1 and probe(server, "ready") == 1


def _overdue_then_back(server: Server) -> None:
    """The engine core SIGKILLed on a server whose restart deadline is `SHORT_DEADLINE_S`: once the
    restart runs past it, both probes fail; once the engine is back, both pass again."""
    assert server.endpoints.pid is not None
    [core] = titled(server.endpoints.pid, ENGINE_CORE)
    os.kill(core.pid, signal.SIGKILL)
    assert state_within(server, EngineState.OVERDUE, OVERDUE_BOUND_S), engine_state(server)
    assert probe(server, "live") == 1 and probe(server, "ready") == 1
    # Refused as retryable meanwhile: the restart goes on, and the replica may yet come back.
    refused = run(server, VLLM_MODEL, Requests(seed=5).make(Modality.TEXT, max_tokens=4), timeout_s=60)
    assert refused.error is not None and p.RESTARTING in refused.error, refused.error
    assert state_within(server, EngineState.SERVING, ENGINE_START_S), engine_state(server)
    assert probe(server, "ready") == 0 and probe(server, "live") == 0


def test_server_killed_under_load(tmp_path_factory: pytest.TempPathFactory) -> None:
    # A next server starts clean after the stub's death above and serves; its engine, killed, stays
    # down past a short restart deadline, then comes back; the server is then killed outright.
    deadline = {"engine_restart_deadline_s": SHORT_DEADLINE_S}
    with fault_server(tmp_path_factory, settings=deadline) as server:
        assert server.endpoints.pid is not None
        _serves(server)
        assert probe(server, "ready") == 0 and probe(server, "live") == 0
        _overdue_then_back(server)
        engine = _engine_processes(server)
        stubs = titled(server.endpoints.pid, STUB)
        client = start_streams(server, long_texts(server, 6, seed=12))
        client.silence_timeout_s = SILENCE_S
        try:
            client.assert_open()
            os.kill(server.endpoints.pid, signal.SIGKILL)
            # Reaped at once, as an init or a container runtime does: a zombie still looks alive to
            # the stubs' check of their parent.
            os.waitpid(server.endpoints.pid, 0)
            killed = time.monotonic()
            survivors = _gone_within(engine + stubs, GONE_BOUND_S)
            assert not survivors, "processes outlived tritonserver"
            # The stream breaks with one error for all; the client ends the others.
            assert client.wait_all(killed + END_BOUND_S).lost == 0
        finally:
            client.close(cancel_requests=True)  # a failed check leaves streams open
