"""Admission control on a real server: beyond `max_pending_requests` in flight, `vllm_model` refuses a
request at once with an "overloaded" error (code UNAVAILABLE; a gRPC stream carries only the message and
Triton 2.51's HTTP generate endpoint answers it with 400), through the ensemble too, counts it, and
serves on."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rps_serve.cli import main
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.client import StreamClient
from rps_serve.workload.shapes import RequestKind
from rps_serve.workload.trace import Trace, write_trace
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

MAX_PENDING = 2
HELD_TOKENS = 8000  # the held requests must outlast the refused ones: near the context of 8,192


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with start_server(
        tmp_path_factory, media={"max_output_tokens": HELD_TOKENS}, max_pending_requests=MAX_PENDING
    ) as running:
        yield running


def _streaming(holders: list[StreamClient], timeout_s: float = 300) -> None:
    """Wait until every holder's request has streamed a chunk: admitted and in flight."""
    deadline = time.monotonic() + timeout_s
    while not all(holder.results["held"].chunks for holder in holders):
        assert time.monotonic() < deadline, "the held requests never started streaming"
        assert not any(holder.results["held"].error for holder in holders)
        time.sleep(0.05)


def test_requests_beyond_the_limit_are_refused_at_once_and_the_server_serves_on(
    server: Server, requests: Requests
) -> None:
    before = wait_drained(server)
    holders = [StreamClient(server.endpoints.grpc_url) for _ in range(MAX_PENDING)]
    try:
        for holder in holders:
            holder.submit(VLLM_MODEL, "held", requests.make(Modality.TEXT, max_tokens=HELD_TOKENS).tensors())
        _streaming(holders)
        status, body = generate(server, VLLM_MODEL, requests.make(Modality.TEXT, stream=False))
        refused = [run(server, model, requests.make(Modality.TEXT).tensors()) for model in MODELS]
        # The limit was reached all along: the held requests were still streaming.
        assert not any(holder.results["held"].done_s for holder in holders)
    finally:
        for holder in holders:
            holder.close(cancel_requests=True)

    for model, result in zip(MODELS, refused, strict=True):
        assert result.error is not None, model
        assert p.OVERLOADED in result.error and "max_pending_requests" in result.error, result.error
    assert status >= 400 and p.OVERLOADED in body, (status, body)
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
    model = server.repository.parent / "tiny-qwen2-vl"
    argv = ["bench", "--url", server.endpoints.grpc_url, "--trace", str(trace_file), "--model", str(model),
            "--slo", str(slo), "--json", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (result,) = json.loads(out.read_text())["results"].values()
    counts = result["requests"]
    assert counts["sent"] == burst and counts["lost"] == 0 and counts["failed"] == 0
    assert counts["refused"] >= 1 and counts["completed"] + counts["refused"] == burst
    assert all(p.OVERLOADED in error for error in result["error_examples"])
