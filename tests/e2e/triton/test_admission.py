"""Admission control on a real server: beyond `max_pending_requests` in flight, `vllm_model` refuses a
request at once with an "overloaded" error (code UNAVAILABLE; a gRPC stream carries only the message and
Triton 2.51's HTTP generate endpoint answers it with 400), through the ensemble too, counts it, and
serves on.

The limit is filled with requests the test holds in flight for as long as it wants: the server runs the
repository's own `vllm_model` behind a gate (`tests.e2e.triton.gate`) that keeps a request asking for
`HELD_TOKENS` output tokens, once admitted, waiting while the gate is closed, and then serves it as any
other. So whether a request is refused never depends on how fast the machine serves the others."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from rps_harness.client import StreamClient
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace, write_trace
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from tests.e2e.triton.conftest import (
    MODELS,
    VLLM_MODEL,
    Requests,
    Server,
    generate,
    metrics,
    run,
    serves,
    start_server,
    wait_drained,
)
from tests.e2e.triton.faults.conftest import probe
from tests.e2e.triton.gate import Gate

MAX_PENDING = 2
# The output length the gate holds: no other request of this module asks for it.
HELD_TOKENS = 24


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate(tmp_path_factory.mktemp("gate"), HELD_TOKENS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Gate) -> Iterator[Server]:
    with start_server(
        tmp_path_factory, max_pending_requests=MAX_PENDING, model_files={VLLM_MODEL: gate.model_source()}
    ) as running:
        yield running


@contextmanager
def _limit_reached(server: Server, requests: Requests, gate: Gate) -> Iterator[list[StreamClient]]:
    """`MAX_PENDING` requests held at the gate, admitted and in flight: the limit is reached until the
    test opens the gate (or the block ends); their clients, whose request each is `"held"`."""
    holders = [StreamClient(server.endpoints.grpc_url) for _ in range(MAX_PENDING)]
    gate.close()
    try:
        for holder in holders:
            holder.submit(VLLM_MODEL, "held", requests.make(Modality.TEXT, max_tokens=HELD_TOKENS).tensors())

        def healthy() -> None:
            assert not any(holder.results["held"].error for holder in holders)

        gate.wait_held(len(holders), healthy)
        yield holders
    finally:
        gate.open()
        for holder in holders:
            holder.close(cancel_requests=True)


def test_requests_beyond_the_limit_are_refused_at_once_and_the_server_serves_on(
    server: Server, requests: Requests, gate: Gate
) -> None:
    before = wait_drained(server)
    with _limit_reached(server, requests, gate) as holders:
        status, body = generate(server, VLLM_MODEL, requests.make(Modality.TEXT, stream=False))
        refused = [run(server, model, requests.make(Modality.TEXT).tensors()) for model in MODELS]
        # The limit was reached all along: the held requests were still at the gate.
        assert not any(holder.results["held"].done_s for holder in holders)
        gate.open()
        held = [holder.wait("held", timeout_s=300) for holder in holders]

    for model, result in zip(MODELS, refused, strict=True):
        assert result.error is not None, model
        assert p.OVERLOADED in result.error and "max_pending_requests" in result.error, result.error
    assert status >= 400 and p.OVERLOADED in body, (status, body)
    # Once let through, the held requests were served as any other.
    for result in held:
        assert result.error is None, result.error
        assert result.text
    after = wait_drained(server)
    assert (
        after.total("rps_rejected_total", model=VLLM_MODEL)
        - before.total("rps_rejected_total", model=VLLM_MODEL)
        == len(refused) + 1
    )
    assert after.total("rps_requests_total", model=VLLM_MODEL) - before.total(
        "rps_requests_total", model=VLLM_MODEL
    ) == len(holders)
    serves(server, requests)


def test_probes_pass_at_the_admission_limit(server: Server, requests: Requests, gate: Gate) -> None:
    """With the limit reached (one more request is refused as overloaded), both of the deployment's
    probes pass: `vllm_model` answers a health request before admission counts it, so an orchestrator
    does not take a full replica for a failed one."""
    with _limit_reached(server, requests, gate) as holders:
        refused = run(server, VLLM_MODEL, requests.make(Modality.TEXT).tensors())
        assert refused.error is not None and p.OVERLOADED in refused.error, refused.error
        assert probe(server, "ready") == 0
        assert probe(server, "live") == 0
        # Still reached: the held requests were at the gate all along.
        assert not any(holder.results["held"].done_s for holder in holders)
        gate.open()
        for holder in holders:
            assert holder.wait("held", timeout_s=300).error is None
    wait_drained(server)


def test_a_burst_beyond_the_limit_ends_with_refusals_counted_and_nothing_lost(
    server: Server, gate: Gate, tmp_path: Path
) -> None:
    """`rps-serve bench` against the limited server: all requests arrive at once; the first
    `MAX_PENDING` to reach `vllm_model` are admitted and held at the gate until every other one has
    been refused, whatever the order and pace at which the ensemble hands them on; then the held ones
    are served and the run ends reporting each outcome."""
    burst = 8
    trace = Trace(
        arrival_s=np.zeros(burst),
        kind=np.full(burst, list(RequestKind).index(RequestKind.SHORT_TEXT)),
        prompt_tokens=np.full(burst, 40),
        modality_tokens=np.zeros(burst, dtype=np.int64),
        output_tokens=np.full(burst, HELD_TOKENS),
    )
    trace_file, slo, out = tmp_path / "burst.jsonl", tmp_path / "slo.json", tmp_path / "bench.json"
    write_trace(trace_file, trace)
    slo.write_text(json.dumps({"text": 1.0, "image": 1.0, "video": 1.0}))
    script = str(Path(sys.executable).parent / "rps-serve")
    argv = [script, "bench", "--url", server.endpoints.grpc_url, "--trace", str(trace_file),
            "--model", str(server.model), "--slo", str(slo), "--json", str(out), "--no-progress"]  # fmt: skip
    before = wait_drained(server)

    def refused() -> float:
        return metrics(server).total("rps_rejected_total", model=VLLM_MODEL) - before.total(
            "rps_rejected_total", model=VLLM_MODEL
        )

    gate.close()
    bench = subprocess.Popen(argv)
    try:

        def running() -> None:
            assert bench.poll() is None, "bench ended while the gate was closed"

        gate.wait_held(MAX_PENDING, running)
        while refused() < burst - MAX_PENDING:
            running()
            time.sleep(0.05)
        gate.open()
        assert bench.wait(timeout=300) == 0
    finally:
        gate.open()
        bench.kill()
    assert gate.held() == MAX_PENDING and refused() == burst - MAX_PENDING
    (result,) = json.loads(out.read_text())["results"].values()
    counts = result["requests"]
    assert counts == {
        "sent": burst,
        "completed": MAX_PENDING,
        "refused": burst - MAX_PENDING,
        "failed": 0,
        "lost": 0,
    }, counts
    assert all(p.OVERLOADED in error for error in result["error_examples"])
