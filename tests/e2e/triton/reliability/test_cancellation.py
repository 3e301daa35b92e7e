"""Cancelled streams, one at a time and in storms, to `vllm_model` and through the ensemble: the others
complete, what Triton flags is aborted in the engine, and nothing is left."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rps_harness.client import Generation, StreamClient, StreamResult
from rps_harness.loadtest.server_stats import MetricsSnapshot
from rps_serve.requests import Modality
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Requests, Server, serves, wait_drained
from tests.e2e.triton.reliability.conftest import LIMITS


@dataclass(frozen=True)
class Plan:
    cancel: str | None  # None, "at once", "after delay", "mid-stream"
    delay_s: float = 0.0
    chunks: int = 0


def _plans(n: int, rng: random.Random) -> list[Plan]:
    plans = []
    for _ in range(n):
        if rng.random() >= 0.3:
            plans.append(Plan(None))
        else:
            cancel = rng.choice(["at once", "after delay", "mid-stream", "mid-stream"])
            plans.append(Plan(cancel, delay_s=rng.uniform(0, 0.3), chunks=rng.randint(1, 8)))
    return plans


def _drive(server: Server, model: str, generation: Generation, plan: Plan) -> StreamResult | None:
    """Send one request on its own stream; cancel it as planned (None) or return its result."""
    client = StreamClient(server.endpoints.grpc_url)
    client.submit(model, "r", generation.tensors())
    if plan.cancel is None:
        try:
            return client.wait("r", 300)
        finally:
            client.close()
    if plan.cancel == "after delay":
        time.sleep(plan.delay_s)
    elif plan.cancel == "mid-stream":
        deadline = time.monotonic() + 300
        while len(client.results["r"].chunks) < plan.chunks:
            assert time.monotonic() < deadline and client.results["r"].done_s is None
            time.sleep(0.01)
    client.close(cancel_requests=True)
    return None


def _storm(
    server: Server, requests: Requests, model: str, plans: list[Plan], cancelled_tokens: int
) -> list[StreamResult | None]:
    modalities = [Modality.TEXT, Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    generations = [
        requests.make(modalities[i % 4], max_tokens=cancelled_tokens if plan.cancel else 16)
        for i, plan in enumerate(plans)
    ]
    with ThreadPoolExecutor(len(plans)) as pool:
        return list(pool.map(lambda gp: _drive(server, model, *gp), zip(generations, plans, strict=True)))


def _delta(after: MetricsSnapshot, before: MetricsSnapshot, name: str) -> float:
    return after.total(name, model=VLLM_MODEL) - before.total(name, model=VLLM_MODEL)


def test_streams_cancelled_mid_stream_are_aborted_in_the_engine(server: Server, requests: Requests) -> None:
    """Six streams cancelled one at a time after their first chunks (text, image, video, twice): each
    ends and nothing is left, and those Triton flags to the model are aborted in the engine (they ask for
    the output limit of 256 tokens, far more than they get before the cancellation lands). Triton 2.51
    does not flag every stream cancellation (see docs/limits-and-guarantees.md), so at least one of the
    six must be aborted."""
    before = wait_drained(server)
    for modality in (Modality.TEXT, Modality.IMAGE, Modality.VIDEO) * 2:
        generation = requests.make(modality, max_tokens=LIMITS["max_output_tokens"])
        _drive(server, VLLM_MODEL, generation, Plan("mid-stream", chunks=2))
        wait_drained(server)
    after = wait_drained(server)
    assert _delta(after, before, "rps_requests_total") == 6
    aborted = _delta(after, before, "rps_cancelled_total")
    print(f"6 streams cancelled mid-stream one at a time: {aborted:.0f} aborted in the engine")
    assert 1 <= aborted <= 6
    serves(server, requests)


def test_cancellation_storm_on_vllm_model(server: Server, requests: Requests) -> None:
    """30% of 30 concurrent streams cancelled at once, after a random delay or mid-stream: the others
    complete, every admitted request is completed or aborted, no more are aborted than were cancelled, and
    nothing is left."""
    before = wait_drained(server)
    plans = _plans(30, random.Random(11))
    results = _storm(server, requests, VLLM_MODEL, plans, cancelled_tokens=LIMITS["max_output_tokens"])
    after = wait_drained(server)

    completed = [r for r, plan in zip(results, plans, strict=True) if plan.cancel is None]
    assert all(r is not None and r.error is None and r.chunks for r in completed)
    cancelled = _delta(after, before, "rps_cancelled_total")
    admitted = _delta(after, before, "rps_requests_total")
    mid_stream = sum(plan.cancel == "mid-stream" for plan in plans)
    early = sum(plan.cancel in ("at once", "after delay") for plan in plans)
    assert mid_stream >= 3
    assert cancelled <= mid_stream + early
    assert len(completed) + cancelled <= admitted <= len(completed) + mid_stream + early
    print(
        f"storm: {mid_stream + early} cancelled by clients ({mid_stream} mid-stream), "
        f"{admitted - len(completed):.0f} of them reached the engine, {cancelled:.0f} aborted there"
    )
    serves(server, requests)


def test_cancellation_storm_through_the_ensemble(server: Server, requests: Requests) -> None:
    """Through rps_ensemble (Triton 2.51 rarely flags the cancellation to vllm_model, see
    docs/limits-and-guarantees.md): cancelled streams end for their clients, the engine finishes what it
    was not told to abort, the uncancelled complete, and once drained nothing is left in the engine or
    in Triton."""
    before = wait_drained(server)
    plans = _plans(12, random.Random(12))
    results = _storm(server, requests, ENSEMBLE, plans, cancelled_tokens=64)
    after = wait_drained(server)

    completed = [r for r, plan in zip(results, plans, strict=True) if plan.cancel is None]
    assert all(r is not None and r.error is None and r.chunks for r in completed)
    admitted = _delta(after, before, "rps_requests_total")
    cancelled = _delta(after, before, "rps_cancelled_total")
    assert len(completed) <= admitted <= len(plans)
    print(
        f"ensemble storm: {len(plans) - len(completed)} cancelled by clients, "
        f"{admitted:.0f} reached the engine, {cancelled:.0f} aborted there"
    )
    serves(server, requests)
