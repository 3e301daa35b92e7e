"""The `vllm_model` stub (serving RPS, then a stock-vLLM baseline), then tritonserver itself,
SIGKILLed under streaming load: no vLLM engine process outlives them, our client ends the streams
Triton 2.51 leaves open, and a next server starts clean and serves."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from rps_serve.client import StreamClient
from rps_serve.requests import Modality
from rps_serve.triton.settings import POLICY_ENV
from tests.e2e.triton.conftest import MODELS, VLLM_MODEL, Requests, Server, run, start_server
from tests.e2e.triton.faults.conftest import (
    END_BOUND_S,
    ENGINE_CORE,
    STUB,
    WORKER,
    alive,
    long_texts,
    probe,
    start_streams,
    titled,
)

# The engine core polls its parent every 0.5 s; the stub notices a dead tritonserver within 0.3 s.
GONE_BOUND_S = 10.0
# Well above a healthy stream's silence on the tiny model, well below the bound.
SILENCE_S = 15.0


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


# The RPS engine core follows its stub from a thread of its own; a stock-vLLM engine core (the
# baselines) has none, so the stub's watcher ends it.
@pytest.mark.parametrize("policy", ["rps", "fcfs"])
def test_stub_killed_under_load(tmp_path_factory: pytest.TempPathFactory, policy: str) -> None:
    with start_server(tmp_path_factory, env={POLICY_ENV: policy}) as server:
        assert server.endpoints.pid is not None
        engine = _engine_processes(server)
        [stub] = [s for s in titled(server.endpoints.pid, STUB) if VLLM_MODEL in " ".join(s.cmdline())]
        client = start_streams(server, long_texts(6, seed=11))
        client.silence_timeout_s = SILENCE_S
        try:
            os.kill(stub.pid, signal.SIGKILL)
            killed = time.monotonic()
            assert not _gone_within(engine, GONE_BOUND_S), "engine processes outlived their stub"
            _streams_end(client, killed)
        finally:
            client.close(cancel_requests=True)  # a failed check leaves streams open
        # New requests are refused (Triton: the stub "is not healthy"), not left waiting.
        refused = run(server, VLLM_MODEL, Requests(seed=3).make(Modality.TEXT), timeout_s=60)
        assert refused.error is not None
        # Triton 2.51 still calls the model ready; the deployment's liveness probe does not.
        assert probe(server, "live") == 1


def test_server_killed_under_load(tmp_path_factory: pytest.TempPathFactory) -> None:
    # A next server starts clean after the stub's death above, serves, and is then killed outright.
    with start_server(tmp_path_factory) as server:
        assert server.endpoints.pid is not None
        _serves(server)
        assert probe(server, "ready") == 0 and probe(server, "live") == 0
        engine = _engine_processes(server)
        stubs = titled(server.endpoints.pid, STUB)
        client = start_streams(server, long_texts(6, seed=12))
        client.silence_timeout_s = SILENCE_S
        try:
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
