"""Cancelled streams, one at a time and in storms, to `vllm_model` and through the ensemble: the others
complete, what Triton flags is aborted in the engine and ends with a `CANCELLED` error naming it (never
an empty final), and nothing is left.

A client that cancelled its stream hears nothing more, so how a flagged request ended is read where it
ended: the server's instrumented `vllm_model` records it (`instrumentation.Ends`)."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rps_harness.client import Generation, StreamClient, StreamResult
from rps_harness.loadtest.server_stats import MetricsSnapshot
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Requests, Server, serves, wait_drained
from tests.e2e.triton.instrumentation import Ends
from tests.e2e.triton.reliability.conftest import LIMITS

# Storms on vllm_model, each with its own plans: see `test_cancellation_storm_on_vllm_model`.
STORM_SEEDS = (11, 13, 17)


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


def _flagged_end_cancelled(ends: Ends, mark: frozenset[Path], aborted: float) -> int:
    """Every request `vllm_model` ended since `mark` ended with a response or an error, never an empty
    final; each one it was told was cancelled ended with a `CANCELLED` error naming it, and those are
    no fewer than it counted aborted (`aborted`, the change in `rps_cancelled_total`): the counter
    moves just after the CANCELLED error is sent, so a read right after may miss the last (CI: 2
    flagged, 1 counted). How many were told."""
    ended = [end for end in ends.since(mark) if end.model == VLLM_MODEL]
    assert not [end for end in ended if end.end == "empty final"], ended
    flagged = [end for end in ended if end.cancelled]
    wrong = [
        end
        for end in flagged
        if end.code != "CANCELLED" or p.attributed_request(end.message or "") != end.request_id
    ]
    assert not wrong, f"flagged requests that did not end with a CANCELLED error naming them: {wrong}"
    assert aborted <= len(flagged), (flagged, aborted)
    return len(flagged)


def test_streams_cancelled_mid_stream_are_aborted_in_the_engine(
    server: Server, requests: Requests, ends: Ends
) -> None:
    """Six streams cancelled one at a time after their first chunks (text, image, video, twice): each
    ends and nothing is left, and those Triton flags to the model are aborted in the engine (they ask for
    the output limit of 256 tokens, far more than they get before the cancellation lands) and end with a
    `CANCELLED` error. Triton 2.51 does not flag every stream cancellation (see
    docs/limits-and-guarantees.md), so at least one of the six must be aborted."""
    before, mark = wait_drained(server), ends.mark()
    for modality in (Modality.TEXT, Modality.IMAGE, Modality.VIDEO) * 2:
        generation = requests.make(modality, max_tokens=LIMITS["max_output_tokens"])
        _drive(server, VLLM_MODEL, generation, Plan("mid-stream", chunks=2))
        wait_drained(server)
    after = wait_drained(server)
    assert _delta(after, before, "rps_requests_total") == 6
    aborted = _delta(after, before, "rps_cancelled_total")
    print(f"6 streams cancelled mid-stream one at a time: {aborted:.0f} aborted in the engine")
    assert 1 <= aborted <= 6
    _flagged_end_cancelled(ends, mark, aborted)
    serves(server, requests)


def _storm_round(server: Server, requests: Requests, ends: Ends, seed: int) -> float:
    """One storm of 30 streams on vllm_model, about 30% cancelled at once, after a random delay or
    mid-stream: the others complete, every admitted request is completed or aborted, no more are aborted
    than were cancelled, the flagged ones end with a CANCELLED error (`_flagged_end_cancelled`), and
    nothing is left. How many were aborted."""
    before, mark = wait_drained(server), ends.mark()
    plans = _plans(30, random.Random(seed))
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
    _flagged_end_cancelled(ends, mark, cancelled)
    print(
        f"storm {seed}: {mid_stream + early} cancelled by clients ({mid_stream} mid-stream), "
        f"{admitted - len(completed):.0f} of them reached the engine, {cancelled:.0f} aborted there"
    )
    return cancelled


def test_cancellation_storm_on_vllm_model(server: Server, requests: Requests, ends: Ends) -> None:
    """Three storms (`_storm_round`), and at least one cancellation aborted in the engine over the three.

    Why three: Triton 2.51 flags only some stream cancellations to the model, and which ones is not in
    the test's hands. Measured on vllm_model, 8 streams cancelled at the same moment were flagged 1 to
    8 of 8 times a round, and streams cancelled mid-stream one at a time 7 of 8; each storm cancels at
    least 3 streams mid-stream (asserted) among its others. For this test to fail on a healthy server
    every cancellation of three storms would have to go unflagged, which no round measured has shown;
    a server that aborts nothing flagged fails it every time."""
    aborted = sum(_storm_round(server, requests, ends, seed) for seed in STORM_SEEDS)
    assert aborted >= 1, f"no cancellation of {len(STORM_SEEDS)} storms was aborted in the engine"
    serves(server, requests)


def test_cancellation_storm_through_the_ensemble(server: Server, requests: Requests, ends: Ends) -> None:
    """Through rps_ensemble (Triton 2.51 rarely flags the cancellation to vllm_model, see
    docs/limits-and-guarantees.md): cancelled streams end for their clients, the engine finishes what it
    was not told to abort, what it was told ends with a CANCELLED error, the uncancelled complete, and
    once drained nothing is left in the engine or in Triton."""
    before, mark = wait_drained(server), ends.mark()
    plans = _plans(12, random.Random(12))
    results = _storm(server, requests, ENSEMBLE, plans, cancelled_tokens=64)
    after = wait_drained(server)

    completed = [r for r, plan in zip(results, plans, strict=True) if plan.cancel is None]
    assert all(r is not None and r.error is None and r.chunks for r in completed)
    admitted = _delta(after, before, "rps_requests_total")
    cancelled = _delta(after, before, "rps_cancelled_total")
    assert len(completed) <= admitted <= len(plans)
    _flagged_end_cancelled(ends, mark, cancelled)
    print(
        f"ensemble storm: {len(plans) - len(completed)} cancelled by clients, "
        f"{admitted:.0f} reached the engine, {cancelled:.0f} aborted there"
    )
    serves(server, requests)
