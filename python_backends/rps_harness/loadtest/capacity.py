"""What a server sustains, measured before loads that are sized as a fraction or a multiple of it:
completed requests per second of a mix with a fixed number always in flight (closed loop, the soak's
measure and the open-loop search's first guess), and the highest Poisson rate at which the backlog
stays bounded (open loop, the demo's and the comparison's), bracketed by probes."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import count

import numpy as np

from rps_harness.client import Generation, StreamClient
from rps_harness.loadtest.replay import Replayed, drain_allowance_s, generation
from rps_harness.metrics import RequestRecords
from rps_harness.workload.content import ContentLimits, plan_content
from rps_harness.workload.mixes import mix_by_name
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.trace import generate_trace
from rps_serve.triton import protocol as p

logger = logging.getLogger(__name__)


def request_stream(
    mix: str, served: RequestFormat, seed: int, content_seed: int, limits: ContentLimits
) -> Iterator[Generation]:
    """Endless requests of the mix, in batches of 256 drawn from a trace: what each asks for (modality,
    prompt and output lengths) follows `seed`, its text and pixels `content_seed` (one seed per batch,
    counting up from it)."""
    for batch in count():
        trace = generate_trace(mix_by_name(mix), 1.0, 256, seed + batch)
        for content in plan_content(trace, served, limits).contents(served, content_seed + batch):
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
    model: str = p.ENSEMBLE,
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


# A backlog counts as bounded while the requests in the system grow by less than this fraction of the
# arrival rate over the second half of a probe: past capacity they grow by the excess arrival rate.
BOUNDED_GROWTH = 0.1


@dataclass(frozen=True)
class Probe:
    """One open-loop run at `rate`: how fast the requests in the system grew (per second), how many
    were in it at most (`peak_in_system`), and the most a probe may hold to count as bounded
    (`max_in_system`, None for no limit)."""

    rate: float
    growth_per_s: float
    unfinished: int
    peak_in_system: int = 0
    max_in_system: int | None = None

    @property
    def bounded(self) -> bool:
        within = self.max_in_system is None or self.peak_in_system <= self.max_in_system
        return self.unfinished == 0 and within and self.growth_per_s < BOUNDED_GROWTH * self.rate


@dataclass(frozen=True)
class OpenLoopCapacity:
    """The highest Poisson rate whose probe kept the backlog bounded (`rate`), and every probe taken.

    `bracketed` where a probe above `rate` found the backlog growing: the capacity lies between. Where
    none did, `rate` is only a lower bound; where no probe was bounded, `rate` is the search's low
    end, a guess no probe confirmed.
    """

    rate: float
    probes: tuple[Probe, ...]

    @property
    def bracketed(self) -> bool:
        return any(p.bounded for p in self.probes) and any(not p.bounded for p in self.probes)

    def describe(self) -> str:
        shown = ", ".join(
            f"{p.rate:.2f}/s {'bounded' if p.bounded else 'unbounded'} (at most {p.peak_in_system} in)"
            for p in self.probes
        )
        if self.bracketed:
            above = min(p.rate for p in self.probes if not p.bounded)
            return f"{self.rate:.2f} req/s open loop, below {above:.2f} ({shown})"
        if any(p.bounded for p in self.probes):
            return f"at least {self.rate:.2f} req/s open loop: no probe found the backlog growing ({shown})"
        lowest = min(p.rate for p in self.probes)
        return f"below {lowest:.2f} req/s open loop, loads sized from {self.rate:.2f} ({shown})"


def backlog_growth(records: RequestRecords) -> float:
    """Least-squares slope, requests per second, of the requests in the system (arrived, not finished)
    over the second half of the arrivals; a request that never finished stays in the system."""
    arrivals = np.sort(records.arrival_s[np.isfinite(records.arrival_s)])
    if arrivals.size < 4:
        return 0.0
    finishes = np.sort(records.finish_s[np.isfinite(records.finish_s)])
    grid = np.linspace(arrivals[-1] / 2, arrivals[-1], 64)
    in_system = np.searchsorted(arrivals, grid, side="right") - np.searchsorted(finishes, grid, side="right")
    return float(np.polyfit(grid, in_system, 1)[0])


def peak_in_system(records: RequestRecords) -> int:
    """The most requests in the system (arrived, not finished) at once; one that never finished stays."""
    arrivals = records.arrival_s[np.isfinite(records.arrival_s)]
    if not arrivals.size:
        return 0
    finishes = records.finish_s[np.isfinite(records.finish_s)]
    times = np.concatenate([arrivals, finishes])
    # At equal times a finish leaves before an arrival counts (the sort puts -1 first).
    moves = np.concatenate([np.ones(arrivals.size, dtype=np.int64), -np.ones(finishes.size, dtype=np.int64)])
    order = np.lexsort((moves, times))
    return int(np.cumsum(moves[order]).max())


# Where every probe so far was bounded, the next probes this much higher.
STEP_UP = 1.25


def search_open_loop_capacity(
    probe: Callable[[float], Replayed],
    ceiling: float,
    probes: int,
    low_fraction: float = 0.5,
    max_in_system: int | None = None,
) -> OpenLoopCapacity:
    """Bracket, then bisect, the highest rate whose backlog stays bounded, with `probes` open-loop
    runs (`probe(rate)` replays a fresh Poisson workload at that rate).

    The first probe runs at `ceiling` (the closed-loop rate: a guess, which the open-loop capacity
    has come out both below and above); while every probe is bounded the next is `STEP_UP` higher,
    and once one is not, the search bisects between the highest bounded rate (or `low_fraction` x
    `ceiling`) and the lowest unbounded one. Where the last probe is due and none so far was bounded,
    it runs at that low end instead: the rate the loads are sized from is then one a probe saw, not
    a guess taken for a lower bound (45 s of a mix with rare heavy requests can read a rate well
    below capacity as growing, and bisecting down from such probes brackets nothing).

    `max_in_system`: a probe that ever held more requests than this counts as unbounded too, however
    its backlog grew: a server that refuses requests past an admission limit refuses them in the
    bursts of longer runs near a rate whose short probe came close to the limit."""
    bounded_at, unbounded_at = low_fraction * ceiling, math.inf
    rate, taken = ceiling, []
    for _ in range(probes):
        replayed = probe(rate)
        records = replayed.records
        unfinished = replayed.tally.sent - replayed.tally.completed
        result = Probe(rate, backlog_growth(records), unfinished, peak_in_system(records), max_in_system)
        taken.append(result)
        logger.info(
            "open-loop probe at %.2f req/s: backlog grew %.3f req/s, at most %d in the system, "
            "%d unfinished (%s)",
            rate,
            result.growth_per_s,
            result.peak_in_system,
            result.unfinished,
            "bounded" if result.bounded else "unbounded",
        )
        if result.bounded:
            bounded_at = max(bounded_at, rate)
        else:
            unbounded_at = min(unbounded_at, rate)
        if math.isinf(unbounded_at):
            rate = bounded_at * STEP_UP
        elif len(taken) == probes - 1 and not any(p.bounded for p in taken):
            rate = bounded_at
        else:
            rate = (bounded_at + unbounded_at) / 2
    return OpenLoopCapacity(bounded_at, tuple(taken))
