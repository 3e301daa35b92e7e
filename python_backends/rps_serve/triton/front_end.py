"""The CPU work between a request's arrival at `vllm_model` and the engine (decoding its media, vLLM's
input processing), done once per request by worker threads, off the asyncio loop that streams every
response, in order of (class level, arrival): a text never queues behind media, an image overtakes
queued videos. Without class order (the baselines) the order is arrival alone.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

_STOP = -1  # sorts before every class level: a stopping worker takes no more work


class Ticket:
    """A request's place in the queue: withdrawn (its client cancelled) until a worker takes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = False
        self._withdrawn = False

    def take(self) -> bool:
        """For the worker: True if the work is still wanted, and from now on it will be done."""
        with self._lock:
            self._taken = not self._withdrawn
            return self._taken

    def withdraw(self) -> bool:
        """For the client's side: True if the work will never start."""
        with self._lock:
            self._withdrawn = not self._taken
            return self._withdrawn


class FrontEnd:
    """`workers` threads taking work by (level, arrival) when `class_ordered`, else by arrival."""

    def __init__(self, workers: int, class_ordered: bool) -> None:
        if workers < 1:
            raise ValueError(f"the front end needs at least one worker, got {workers}")
        self.class_ordered = class_ordered
        self._queue: queue.PriorityQueue[tuple[int, int, Ticket | None, Callable[[], None] | None]] = (
            queue.PriorityQueue()
        )
        self._arrivals = itertools.count()
        self._threads = [
            threading.Thread(target=self._run, name=f"vllm-model-front-end-{n}", daemon=True)
            for n in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, level: int, work: Callable[[], None]) -> Ticket:
        """Queue `work` (it handles its own errors) for a request of class `level`."""
        ticket = Ticket()
        self._queue.put((level if self.class_ordered else 0, next(self._arrivals), ticket, work))
        return ticket

    def depth(self) -> int:
        """Requests waiting for a worker."""
        return self._queue.qsize()

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put((_STOP, next(self._arrivals), None, None))
        for thread in self._threads:
            thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            _, _, ticket, work = self._queue.get()
            if ticket is None or work is None:
                return
            if not ticket.take():
                continue
            try:
                work()
            except Exception:  # `work` reports its own failures; this is a bug, not a bad request
                logger.exception("front-end work failed")
