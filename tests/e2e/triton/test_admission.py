"""Admission control on a real server: beyond `max_pending_requests` in flight, `vllm_model` refuses a
request at once with an "overloaded" error (code UNAVAILABLE; a gRPC stream carries only the message and
Triton 2.51's HTTP generate endpoint answers it with 400), through the ensemble too, counts it, and
serves on.

The limit is filled with requests the test holds in flight for as long as it wants: the server runs the
repository's own `vllm_model` behind a gate (`GATED_MODEL`) that keeps a request whose prompt carries
`MARKER`, once admitted, waiting while the test's gate file exists, and then serves it as any other."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rps_harness.cli import main
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
    run,
    serves,
    start_server,
    wait_drained,
)
from tests.e2e.triton.faults.conftest import probe

MAX_PENDING = 2
MARKER = "[held at the test's gate]"

GATED_MODEL = '''
import asyncio
import locale
import uuid
from pathlib import Path

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

import triton_python_backend_utils as pb_utils

from rps_serve.triton import protocol as p
from rps_serve.triton.backend import tensor_getter
from rps_serve.triton.vllm_model import TritonPythonModel as Served

GATE = Path({gate!r})
MARKER = {marker!r}


class TritonPythonModel(Served):
    """The real vllm_model. A request whose prompt carries MARKER, once admitted (counted in
    `pending`), reports itself with a `held-*` file in GATE and waits while GATE/closed exists, on
    the model's loop without blocking it; then it is served as any other."""

    async def _generate(self, request, sender):
        if MARKER in p.parse_request(tensor_getter(pb_utils, request)).prompt:
            (GATE / f"held-{{uuid.uuid4().hex}}").touch()
            while (GATE / "closed").exists():
                await asyncio.sleep(0.05)
        await super()._generate(request, sender)
'''


class Gate:
    """The test's side of `GATED_MODEL`'s gate."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.closed = directory / "closed"

    def close(self) -> None:
        for held in self.directory.glob("held-*"):
            held.unlink()
        self.closed.touch()

    def open(self) -> None:
        self.closed.unlink(missing_ok=True)

    def held(self) -> int:
        """How many requests have reached the gate since it was closed."""
        return len(list(self.directory.glob("held-*")))


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Gate) -> Iterator[Server]:
    model = GATED_MODEL.format(gate=str(gate.directory), marker=MARKER)
    with start_server(
        tmp_path_factory, max_pending_requests=MAX_PENDING, model_files={VLLM_MODEL: model}
    ) as running:
        yield running


def _held(gate: Gate, holders: list[StreamClient], timeout_s: float = 300) -> None:
    """Wait until every holder's request is at the gate: admitted and in flight."""
    deadline = time.monotonic() + timeout_s
    while gate.held() < len(holders):
        assert time.monotonic() < deadline, f"{gate.held()} of {len(holders)} requests reached the gate"
        assert not any(holder.results["held"].error for holder in holders)
        time.sleep(0.05)


@contextmanager
def _limit_reached(server: Server, requests: Requests, gate: Gate) -> Iterator[list[StreamClient]]:
    """`MAX_PENDING` requests held at the gate, admitted and in flight: the limit is reached until the
    test opens the gate (or the block ends); their clients, whose request each is `"held"`."""
    holders = [StreamClient(server.endpoints.grpc_url) for _ in range(MAX_PENDING)]
    gate.close()
    try:
        for holder in holders:
            generation = requests.make(Modality.TEXT)
            generation = replace(generation, prompt=MARKER + generation.prompt)
            holder.submit(VLLM_MODEL, "held", generation.tensors())
        _held(gate, holders)
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
    server: Server, tmp_path: Path
) -> None:
    """`rps-serve bench` against the limited server: all requests arrive at once, the server refuses
    those beyond the limit at once, and the run ends (its deadline bounds it) reporting each outcome."""
    burst = 8
    trace = Trace(
        arrival_s=np.zeros(burst),
        kind=np.full(burst, list(RequestKind).index(RequestKind.SHORT_TEXT)),
        prompt_tokens=np.full(burst, 40),
        modality_tokens=np.zeros(burst, dtype=np.int64),
        # Long enough that the admitted requests are still decoding when the rest arrive.
        output_tokens=np.full(burst, 2000),
    )
    trace_file, slo, out = tmp_path / "burst.jsonl", tmp_path / "slo.json", tmp_path / "bench.json"
    write_trace(trace_file, trace)
    slo.write_text(json.dumps({"text": 1.0, "image": 1.0, "video": 1.0}))
    argv = ["bench", "--url", server.endpoints.grpc_url, "--trace", str(trace_file),
            "--model", str(server.model), "--slo", str(slo), "--json", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (result,) = json.loads(out.read_text())["results"].values()
    counts = result["requests"]
    assert counts["sent"] == burst and counts["lost"] == 0 and counts["failed"] == 0
    assert counts["refused"] >= 1 and counts["completed"] + counts["refused"] == burst
    assert all(p.OVERLOADED in error for error in result["error_examples"])
