"""Queue Manager: one arrival-ordered queue per class level, merged in global score order."""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from rps_serve.scheduling.regulator import PriorityRegulator, QueueStats

T = TypeVar("T", bound=Hashable)


# Order inside a class queue: arrival, then insertion.
_arrival_order = operator.attrgetter("arrival_time", "seq")


@dataclass(eq=False, slots=True)
class _Entry(Generic[T]):
    item: T
    level: int
    arrival_time: float
    seq: int


class ClassQueues(Generic[T]):
    """Waiting requests, one queue per class level.

    Every policy orders requests of one class by arrival (priority grows with waiting time, deadlines
    with arrival), so each class is a FIFO kept in arrival order and the global order is a merge of
    the heads. Call `begin_iteration()` once per scheduling iteration: it reads the clock, and feeds
    the per-class length and mean age to the regulator, which updates the queue-pressure boosts.
    Ties between equal scores go to the earlier arrival, then to the earlier insertion.

    Scores hold for one iteration (fixed clock and boosts): they are computed in vectorized chunks
    from the head of each class queue and cached until the next `begin_iteration()`, so taking the
    next request costs a comparison of at most one cached score per class.

    Starvation guard, under rps: a request of a heavier class that has
    aged past a lightest-class request arriving now holds the head of the order until it leaves the
    queue. Without it, a request that waits for KV blocks held by running sand would block the sand
    queued behind it only until that sand ages past it (p = 3.5 ages sand within a second), and
    under a steady stream of sand it would never see the cache drain.
    """

    score_chunk = 4  # most steps admit a handful per class; each further handful costs one call

    def __init__(self, regulator: PriorityRegulator, clock: Callable[[], float] = time.monotonic) -> None:
        self.regulator = regulator
        self._clock = clock
        self._queues: list[deque[_Entry[T]]] = [deque() for _ in range(regulator.num_levels)]
        self._arrival_sums = [0.0] * regulator.num_levels
        self._entries: dict[T, _Entry[T]] = {}
        self._seq = itertools.count()
        self._scores: dict[int, float] = {}
        self._guard = regulator.policy.row.starvation_guard
        self._held: _Entry[T] | None = None
        self._fresh_score: float | None = None  # a lightest-class arrival's score, this iteration
        self.now = clock()

    def begin_iteration(self) -> list[QueueStats]:
        self.now = self._clock()
        self._scores.clear()
        self._fresh_score = None
        stats = self.stats()
        self.regulator.observe(stats)
        return stats

    def stats(self) -> list[QueueStats]:
        """Length and mean waiting time of every class queue at `now`."""
        return [
            QueueStats(len(queue), max(self.now - total / len(queue), 0.0) if queue else 0.0)
            for queue, total in zip(self._queues, self._arrival_sums, strict=True)
        ]

    def add(self, item: T, level: int, arrival_time: float) -> None:
        """Queue `item` in its class, placed by arrival time (a preempted request returns near the head)."""
        if item in self._entries:
            raise ValueError(f"{item!r} is already queued")
        if not 0 <= level < self.regulator.num_levels:
            raise ValueError(f"class level {level} is outside 0..{self.regulator.num_levels - 1}")
        entry = _Entry(item, level, arrival_time, next(self._seq))
        queue = self._queues[level]
        if not queue or _arrival_order(queue[-1]) <= _arrival_order(entry):
            queue.append(entry)
        else:
            queue.insert(bisect.bisect_right(queue, _arrival_order(entry), key=_arrival_order), entry)
        self._entries[item] = entry
        self._arrival_sums[level] += arrival_time

    def remove(self, item: T) -> None:
        entry = self._entries.pop(item)
        self._queues[entry.level].remove(entry)
        self._forget(entry)

    def _forget(self, entry: _Entry[T]) -> None:
        if entry is self._held:
            self._held = None
        self._arrival_sums[entry.level] -= entry.arrival_time
        if not self._queues[entry.level]:
            self._arrival_sums[entry.level] = 0.0  # drop accumulated rounding error

    def __contains__(self, item: object) -> bool:
        return item in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def level_of(self, item: T) -> int:
        return self._entries[item].level

    def score(self, level: int, arrival_time: float) -> float:
        """Score of a request of `level` that arrived at `arrival_time`, as of this iteration."""
        return float(self.regulator.scores(np.array([level]), np.array([arrival_time]), self.now)[0])

    def _head_score(self, queue: deque[_Entry[T]]) -> float:
        head = queue[0]
        if head.seq not in self._scores:
            self._score_heads()
        return self._scores[head.seq]

    def _score_heads(self) -> None:
        """Score the first `score_chunk` requests of every class in one vectorized call."""
        chunk = [entry for queue in self._queues for entry in itertools.islice(queue, self.score_chunk)]
        scores = self.regulator.scores(
            np.fromiter((e.level for e in chunk), dtype=np.int64, count=len(chunk)),
            np.fromiter((e.arrival_time for e in chunk), dtype=np.float64, count=len(chunk)),
            self.now,
        )
        self._scores.update(zip((e.seq for e in chunk), scores.tolist(), strict=True))

    def _best_head(self) -> _Entry[T]:
        if self._held is not None:
            return self._held
        best: _Entry[T] | None = None
        best_key = (math.inf, math.inf, 0)
        for queue in self._queues:
            if queue:
                key = (self._head_score(queue), *_arrival_order(queue[0]))
                if best is None or key < best_key:
                    best, best_key = queue[0], key
        if best is None:
            raise IndexError("no request is waiting")
        if self._guard and best.level > 0:
            if self._fresh_score is None:
                self._fresh_score = self.score(0, self.now)
            if best_key[0] <= self._fresh_score:
                self._held = best
        return best

    def peek(self) -> T:
        """The request that would run next."""
        return self._best_head().item

    def pop(self) -> T:
        entry = self._best_head()
        queue = self._queues[entry.level]
        if queue[0] is entry:
            queue.popleft()
        else:  # a held request that an older re-queued request of its class has since passed
            queue.remove(entry)
        del self._entries[entry.item]
        self._forget(entry)
        return entry.item

    def heavier_than(self, level: int) -> list[tuple[T, int]]:
        """The waiting requests of classes heavier than `level`, with their levels, class by class in
        arrival order: unscored, for a caller that needs each of them but not the global order."""
        return [(entry.item, entry.level) for queue in self._queues[level + 1 :] for entry in queue]

    def ordered(self) -> list[T]:
        """Every waiting request, best first: a held request, then ascending (score, arrival, insertion)."""
        entries = [entry for queue in self._queues for entry in queue]
        count = len(entries)
        levels = np.fromiter((e.level for e in entries), dtype=np.int64, count=count)
        arrivals = np.fromiter((e.arrival_time for e in entries), dtype=np.float64, count=count)
        seqs = np.fromiter((e.seq for e in entries), dtype=np.int64, count=count)
        scores = self.regulator.scores(levels, arrivals, self.now)
        order = [entries[i].item for i in np.lexsort((seqs, arrivals, scores))]
        if self._held is not None:
            order.remove(self._held.item)
            order.insert(0, self._held.item)
        return order

    def __iter__(self) -> Iterator[T]:
        return iter(self.ordered())
