"""Admission control on a real server: beyond `max_pending_requests` in flight, `vllm_model` refuses a
request at once with an "overloaded" error (code UNAVAILABLE; a gRPC stream carries only the message and
Triton 2.51's HTTP generate endpoint answers it with 400), through the ensemble too, counts it, and
serves on."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from rps_serve.triton.client import StreamClient
from tests.triton.conftest import Requests, Server, start_server
from tests.triton.test_reliability import MODELS, VLLM_MODEL, generate, run, serves, wait_drained

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
