"""Helpers for the fault tests: the server's processes by vLLM's titles, long streams to kill under,
Triton's readiness endpoints and the deployment's probes."""

from __future__ import annotations

import random
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil

from rps_harness.client import Generation, StreamClient
from rps_harness.workload.prompts import filler_text
from rps_serve import probe as probes
from rps_serve.requests import Modality
from rps_serve.triton.engine_supervisor import EngineState
from tests.e2e.triton.conftest import ENSEMBLE, Server
from tests.prompts import chat_prompt

ENGINE_CORE, WORKER = "VLLM::EngineCore", "VLLM::Worker"
STUB = "triton_python_backend_stub"
# The bound: every request in flight ends (a final response or an error) this soon after a fault.
END_BOUND_S = 30.0
# Generous bounds for an engine start (16-33 s measured on 2 cores) and a server start on a shared machine.
ENGINE_START_S = 150.0


def titled(root_pid: int, title: str) -> list[psutil.Process]:
    """The descendants of `root_pid` whose command line (vLLM's process title) contains `title`."""
    found = []
    for process in psutil.Process(root_pid).children(recursive=True):
        try:
            if title in " ".join(process.cmdline()):
                found.append(process)
        except psutil.NoSuchProcess:
            continue
    return found


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `processes` still running (a zombie has ended)."""
    running = []
    for process in processes:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            continue
    return running


# Near model.json's output limit (4,096): on a fast machine the tiny model decodes ~250 tokens a second
# a stream, and the six streams can take seconds to all start under load, so 1,500 tokens once let a
# stream finish before the fault (CI, 6 December).
LONG_TEXT_TOKENS = 4000


def long_texts(n: int, seed: int, max_tokens: int = LONG_TEXT_TOKENS) -> list[Generation]:
    """`n` long texts, each asking for many more tokens than the fault leaves them time for."""
    rng = random.Random(seed)
    return [
        Generation(
            chat_prompt(filler_text(300, rng), Modality.TEXT),
            sampling_parameters={"max_tokens": max_tokens, "ignore_eos": True},
            stream=True,
        )
        for _ in range(n)
    ]


def start_streams(server: Server, generations: list[Generation], timeout_s: float = 180) -> StreamClient:
    """Stream `generations` through `rps_ensemble` on one gRPC stream; returns once each has produced
    text, so every one is in the engine when the test strikes, and none has used half its tokens (else
    a stream could end by itself around the fault, and the test would not test it)."""
    client = StreamClient(server.endpoints.grpc_url)
    for index, generation in enumerate(generations):
        client.submit(ENSEMBLE, f"long-{index}", generation.tensors())
    deadline = time.monotonic() + timeout_s
    while not all(result.chunks for result in client.results.values()):
        ended = {
            r: (result.error, len(result.chunks))
            for r, result in client.results.items()
            if result.done_s is not None
        }
        assert not ended, f"streams ended before the fault (error, chunks): {ended}"
        assert time.monotonic() < deadline, "streams produced no text"
        time.sleep(0.05)
    budget = {
        r: int(g.sampling_parameters["max_tokens"]) // 2
        for r, g in zip(client.results, generations, strict=True)
    }
    used = {r: len(result.chunks) for r, result in client.results.items()}
    assert all(used[r] < budget[r] for r in used), f"streams too far along for the fault: {used}"
    return client


def status(server: Server, path: str) -> int | None:
    """The HTTP status of `path` on the server (None if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://{server.endpoints.http_url}{path}", timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def probe(server: Server, check: str) -> int:
    """The exit status of the deployment's probe `check` (`ready` or `live`), run as the image runs it."""
    command = [sys.executable, "-m", "rps_serve.probe", check, "--http", server.endpoints.http_url]
    return subprocess.run(command, timeout=60, check=False).returncode


def engine_state(server: Server) -> EngineState | str:
    """The engine state `vllm_model` reports to the probes, or why it reports none."""
    try:
        return probes.engine_state(server.endpoints.http_url)
    except probes.ProbeFailed as failed:
        return str(failed)


def state_within(server: Server, state: EngineState, bound_s: float) -> bool:
    """Whether `vllm_model` reports its engine `state` within `bound_s`."""
    deadline = time.monotonic() + bound_s
    while engine_state(server) is not state:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
