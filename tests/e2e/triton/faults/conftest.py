"""Helpers for the fault tests: servers on the shipped policy whose streams cannot end by themselves
before the fault, the server's processes by vLLM's titles, Triton's readiness endpoints and the
deployment's probes."""

from __future__ import annotations

import contextlib
import io
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from rps_harness.client import Generation, StreamClient
from rps_harness.workload.prompts import filler_text
from rps_serve import probe as probes
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.engine_supervisor import EngineState
from rps_serve.triton.settings import POLICY_ENV, SETTINGS_FILE, read_settings
from tests.checkout import REPOSITORY
from tests.e2e.builds import tiny_model
from tests.e2e.triton.conftest import ENSEMBLE, SPEC, VLLM_MODEL, Server, start_server
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


# The policy the repository ships (model.json's): the fault servers run it unless a test names another.
SHIPPED_POLICY = read_settings(REPOSITORY / SETTINGS_FILE, REPOSITORY, environ={}).policy.value


def model_positions(model: Path) -> int:
    """The longest context the checkpoint at `model` takes (its `max_position_embeddings`)."""
    config = json.loads((model / "config.json").read_text())
    return int(config.get("text_config", config)["max_position_embeddings"])


@contextmanager
def fault_server(
    tmp_path_factory: pytest.TempPathFactory,
    policy: str = SHIPPED_POLICY,
    settings: Mapping[str, object] | None = None,
    model_files: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """A server of the repository as it ships, on `policy`, whose engine takes as long a context as the
    tiny model's positions allow (32,768; model.json serves 8,192) and whose requests may ask for as
    many tokens (model.json: 4,096), so that a long text streams until its context is full. Its KV
    cache holds six such streams whole: the tiny model keeps 1 KiB a token (2 layers x K and V x 2 KV
    heads x 32 x 4 bytes), six full contexts 192 MiB of the 1 GiB a test server gets
    (`VLLM_CPU_KVCACHE_SPACE`). `model_files` replace models' sources, as in `start_server`."""
    context = model_positions(tiny_model(tmp_path_factory, SPEC))
    shipped = json.loads((REPOSITORY / SETTINGS_FILE).read_text())
    long_context = {"engine_args": {**shipped["engine_args"], "max_model_len": context}}
    with start_server(
        tmp_path_factory,
        media={"max_output_tokens": context},
        env={POLICY_ENV: policy},
        settings={**long_context, **(settings or {})},
        model_files=model_files,
    ) as server:
        yield server


def served_context(server: Server) -> int:
    """The context `server`'s engine serves (model.json's `engine_args.max_model_len`)."""
    settings = json.loads((server.repository / SETTINGS_FILE).read_text())
    return int(settings["engine_args"]["max_model_len"])


def long_texts(server: Server, n: int, seed: int) -> list[Generation]:
    """`n` long texts, each asking for as many tokens as `server`'s whole context (`served_context`)
    and no fewer (`ignore_eos`, and `min_tokens`: no stop token ends it either), so that only the
    context's end stops one. Their responses count the tokens they carry (`num_output_tokens`)."""
    rng = random.Random(seed)
    tokens = served_context(server)
    return [
        Generation(
            chat_prompt(filler_text(300, rng), Modality.TEXT),
            sampling_parameters={"max_tokens": tokens, "min_tokens": tokens, "ignore_eos": True},
            stream=True,
            additional_outputs=(p.NUM_OUTPUT_TOKENS,),
        )
        for _ in range(n)
    ]


class LongStreams(StreamClient):
    """Long texts on one gRPC stream, counting the tokens each has generated from its responses
    (`num_output_tokens`: what is new in each)."""

    def __init__(self, url: str, context: int) -> None:
        self.context = context
        # At most this many tokens a prompt: the tiny models' tokenizer is byte-level, and a token
        # stands for a byte at least.
        self.prompt_bound: dict[str, int] = {}
        self.output_tokens: dict[str, int] = {}
        self.max_tokens: dict[str, int] = {}
        super().__init__(url)

    def _on_response(self, result: Any, error: Any) -> None:
        if error is None:
            request_id = result.get_response().id
            generated = result.as_numpy(p.NUM_OUTPUT_TOKENS)
            if generated is not None:
                self.output_tokens[request_id] = self.output_tokens.get(request_id, 0) + int(generated.sum())
        super()._on_response(result, error)

    def left(self, request_id: str) -> int:
        """The tokens `request_id` may still generate, at least: up to its `max_tokens` or the
        context's end."""
        budget = min(self.max_tokens[request_id], self.context - self.prompt_bound[request_id])
        return budget - self.output_tokens.get(request_id, 0)

    def ended(self) -> dict[str, tuple[str | None, int]]:
        """The streams that have ended: their error (None: their final response) and chunks."""
        return {r: (res.error, len(res.chunks)) for r, res in self.results.items() if res.done_s is not None}

    def assert_open(self) -> None:
        """Just before the fault: every stream is still open (no final response, no error) and has
        generated less than half of what it may. What a stream has generated when the fault strikes
        hardly depends on the machine's speed (a faster machine also starts the six sooner), and the
        half left is more than a minute of generation at the fastest rate seen on the CPU stack
        (about 400 tokens a second a stream): a stream ends by the fault, not by itself, unless the
        responses reach the client more than that late."""
        assert not self.ended(), f"streams ended before the fault (error, chunks): {self.ended()}"
        used = {r: (self.output_tokens.get(r, 0), self.left(r)) for r in self.results}
        assert all(tokens for tokens, _ in used.values()), f"streams' tokens uncounted: {used}"
        assert all(tokens < left for tokens, left in used.values()), (
            f"streams too far along for the fault (generated, left): {used}"
        )


# A stream is set up again this many times if its connection breaks before the fault (below).
STREAM_TRIES = 3


def start_streams(server: Server, generations: list[Generation], timeout_s: float = 300) -> LongStreams:
    """Stream `generations` through `rps_ensemble` on one gRPC stream; returns once each has produced
    text, so every one is in the engine when the test strikes. The test checks them
    (`LongStreams.assert_open`) just before it does. The wait is a deadline, not a verdict.

    A stream whose connection breaks before the fault is set up again on a new one, up to
    `STREAM_TRIES` in all: on the 2-core machine with every core busy, Triton 2.51 reset its gRPC
    connection to this client in 9 of 32 tries, mostly as the six streams began, while it went on
    serving (docs/testing.md); a broken setup says nothing of the fault under test."""
    broken = []
    for _ in range(STREAM_TRIES):
        client = _streams(server, generations, timeout_s)
        if client.stream_error is None:
            return client
        broken.append(client.stream_error)
        client.close()
    raise AssertionError(f"the streams' connection broke before the fault, {STREAM_TRIES} times: {broken}")


def _streams(server: Server, generations: list[Generation], timeout_s: float) -> LongStreams:
    """One try of `start_streams`: the streams, each with text, or with the stream's error."""
    client = LongStreams(server.endpoints.grpc_url, served_context(server))
    for index, generation in enumerate(generations):
        request_id = f"long-{index}"
        client.max_tokens[request_id] = int(generation.sampling_parameters["max_tokens"])
        client.prompt_bound[request_id] = len(generation.prompt.encode())
        client.submit(ENSEMBLE, request_id, generation.tensors())
    deadline = time.monotonic() + timeout_s
    while not all(result.chunks for result in client.results.values()):
        if client.stream_error is not None:
            return client
        assert not client.ended(), f"streams ended before the fault (error, chunks): {client.ended()}"
        assert time.monotonic() < deadline, "streams produced no text"
        time.sleep(0.05)
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


def probe_result(server: Server, check: str) -> tuple[int, str]:
    """The exit status of the deployment's probe `check` (`ready` or `live`), its command line's `main`
    run in this process, and what it wrote on stderr (why it failed). Not a process of its own: on the
    2-core stack saturated by six streams a fresh probe process took 5 to 54 s in 6 of 12 tries while
    the server answered each within 4 s, which says nothing of the server (docs/limits-and-guarantees.md);
    `tests/unit/test_probe.py` runs the command line itself."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        status = probes.main([check, "--http", server.endpoints.http_url])
    return status, stderr.getvalue()


def probe(server: Server, check: str) -> int:
    """The exit status of the deployment's probe `check` (`ready` or `live`)."""
    return probe_result(server, check)[0]


def vllm_model_stub(server: Server) -> psutil.Process:
    """The Python-backend stub process serving `vllm_model`."""
    assert server.endpoints.pid is not None
    [stub] = [s for s in titled(server.endpoints.pid, STUB) if VLLM_MODEL in " ".join(s.cmdline())]
    return stub


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
