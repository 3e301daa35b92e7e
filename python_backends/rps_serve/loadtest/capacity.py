"""What a server sustains: completed requests per second of a mix with a fixed number always in flight
(closed loop), measured before loads that are sized as a fraction or a multiple of it (demo, soak)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import count

from rps_serve.loadtest.replay import ENSEMBLE, drain_allowance_s, generation
from rps_serve.tiny_model import TinyModelSpec
from rps_serve.triton.client import Generation, StreamClient
from rps_serve.workload.content import ContentLimits, plan_content
from rps_serve.workload.mixes import mix_by_name
from rps_serve.workload.trace import generate_trace

logger = logging.getLogger(__name__)


def request_stream(
    mix: str, media: TinyModelSpec, seed: int, content_seed: int, limits: ContentLimits
) -> Iterator[Generation]:
    """Endless requests of the mix, in batches of 256 drawn from a trace: what each asks for (modality,
    prompt and output lengths) follows `seed`, its text and pixels `content_seed` (one seed per batch,
    counting up from it)."""
    for batch in count():
        trace = generate_trace(mix_by_name(mix), 1.0, 256, seed + batch)
        for content in plan_content(trace, media, limits).contents(media, content_seed + batch):
            yield generation(content)


@dataclass(frozen=True)
class Capacity:
    """A closed-loop measurement: `rate` completed requests per second with `concurrency` in flight."""

    rate: float
    completed: int
    duration_s: float
    concurrency: int
    unfinished: int  # requests that failed, were refused or got no answer in time (not counted)


def measure_capacity(
    url: str,
    requests: Iterator[Generation],
    duration_s: float,
    concurrency: int = 16,
    model: str = ENSEMBLE,
) -> Capacity:
    """Completed requests per second over `duration_s` with `concurrency` requests always in flight.

    A request that fails, is refused or gets no answer within `drain_allowance_s` ends its worker: the
    measurement never waits longer than that past `duration_s`.
    """
    lock = threading.Lock()
    completions: list[float] = []
    unfinished = 0

    def worker(index: int) -> None:
        nonlocal unfinished
        client = StreamClient(url)
        try:
            for n in count():
                with lock:
                    request = next(requests)
                request_id = f"c{index}-{n}"
                client.submit(model, request_id, request.tensors())
                client.wait_all(time.monotonic() + drain_allowance_s([request]))
                result = client.results[request_id]
                with lock:
                    if result.error is not None or result.done_s is None:
                        unfinished += 1
                        return
                    completions.append(result.done_s)
                if result.done_s > deadline:
                    return
        finally:
            client.close(cancel_requests=True)

    start = time.monotonic()
    deadline = start + duration_s
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(worker, range(concurrency)))
    completed = sum(t <= deadline for t in completions)
    if unfinished:
        logger.warning("capacity: %d requests did not complete (refused, failed or lost)", unfinished)
    return Capacity(completed / duration_s, completed, duration_s, concurrency, unfinished)
