"""Queue Manager: one arrival-ordered queue per class level, merged in global score order."""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from rps_serve.scheduling.regulator import PriorityRegulator

T = TypeVar("T", bound=Hashable)


# Order inside a class queue: arrival, then insertion.
_arrival_order = operator.attrgetter("arrival_time", "seq")


@dataclass(eq=False, slots=True)
class _Entry(Generic[T]):
    item: T
    level: int
    arrival_time: float
    seq: int
    group: Hashable | None = None  # parked in that group's run of its class


class ClassQueues(Generic[T]):
    """Waiting requests, one queue per class level.

    Every policy orders requests of one class by arrival (priority grows with waiting time, deadlines
    with arrival), so each class is a FIFO kept in arrival order and the global order is a merge of
    the heads. Call `begin_iteration()` once per scheduling iteration: it reads the clock, and feeds
    the per-class length and mean age to the regulator, which updates the queue-pressure boosts.
    Ties between equal scores go to the earlier arrival, then to the earlier insertion.

    Scores hold for one iteration (fixed clock and boosts): a class head's score is computed when it
    first heads its queue and cached until the next `begin_iteration()`, so taking the next request
    costs one comparison per class and one score per request taken, whatever the queue's length.

    Starvation guard, under rps: a request of a heavier class that has
    aged past a lightest-class request arriving now holds the head of the order until it leaves the
    queue. Without it, a request that waits for KV blocks held by running sand would block the sand
    queued behind it only until that sand ages past it (p = 3.5 ages sand within a second), and
    under a steady stream of sand it would never see the cache drain.

    Groups of requests can sit out iterations without leaving the queue (the decode hold): `park`
    moves them into a run of their class, kept in arrival order beside the class queue; while an
    iteration skips a group (`skip_groups`) its runs are left out of the order, and `unpark` merges
    them back. A group costs an iteration one check, whatever its size. `visited` counts the
    entries scored and the heads compared, for tests that show the work of an iteration.

    For one iteration a class head can lead the order (`lead`): a light step's heavier request that
    keeps its share of the step ahead of the sand queued before it (`scheduling.light_steps`).
    """

    def __init__(self, regulator: PriorityRegulator, clock: Callable[[], float] = time.monotonic) -> None:
        self.regulator = regulator
        self._clock = clock
        self._queues: list[deque[_Entry[T]]] = [deque() for _ in range(regulator.num_levels)]
        self._counts = [0] * regulator.num_levels  # per class, its queue and runs together
        self._arrival_sums = [0.0] * regulator.num_levels
        self._entries: dict[T, _Entry[T]] = {}
        self._seq = itertools.count()
        self._scores: dict[int, float] = {}
        self._guard = regulator.policy.row.starvation_guard
        self._held: _Entry[T] | None = None
        self._lead: _Entry[T] | None = None  # first for the current iteration only (`lead`)
        self._best: _Entry[T] | None = None  # the next request, until the queue or the clock changes
        self._fresh_score: float | None = None  # a lightest-class arrival's score, this iteration
        self._runs: list[dict[Hashable, deque[_Entry[T]]]] = [{} for _ in range(regulator.num_levels)]
        self._skipped: Callable[[Hashable], bool] | None = None
        self._skipped_count = 0  # requests in skipped runs
        self.visited = 0
        self.now = clock()

    def begin_iteration(self) -> None:
        """A scheduling step begins: the clock is read once for it, and an aging order's queue
        pressure observed."""
        self.now = self._clock()
        self._scores.clear()
        self._best = None
        self._lead = None
        self._fresh_score = None
        if self.regulator.ages:
            self.regulator.observe(self.stats())

    def stats(self) -> list[tuple[int, float]]:
        """Length and mean waiting time of every class queue at `now` (plain tuples: a step makes
        them for every class, and `QueueStats` objects cost several times as much)."""
        now = self.now
        return [
            (count, max(now - total / count, 0.0) if count else 0.0)
            for count, total in zip(self._counts, self._arrival_sums, strict=True)
        ]

    def add(self, item: T, level: int, arrival_time: float, group: Hashable | None = None) -> None:
        """Queue `item` in its class, placed by arrival time (a preempted request returns near the head);
        with `group`, in that group's run of its class."""
        if item in self._entries:
            raise ValueError(f"{item!r} is already queued")
        if not 0 <= level < self.regulator.num_levels:
            raise ValueError(f"class level {level} is outside 0..{self.regulator.num_levels - 1}")
        entry = _Entry(item, level, arrival_time, next(self._seq), group)
        self._best = None
        _insort(self._queues[level] if group is None else self._runs[level].setdefault(group, deque()), entry)
        if group is not None and self._skipped is not None and self._skipped(group):
            self._skipped_count += 1
        self._entries[item] = entry
        self._counts[level] += 1
        self._arrival_sums[level] += arrival_time

    def remove(self, item: T) -> None:
        entry = self._entries.pop(item)
        queue = self._queue_of(entry)
        if queue[0] is entry:
            queue.popleft()
        else:
            queue.remove(entry)
        self._forget(entry)

    def _queue_of(self, entry: _Entry[T]) -> deque[_Entry[T]]:
        return self._queues[entry.level] if entry.group is None else self._runs[entry.level][entry.group]

    def _forget(self, entry: _Entry[T]) -> None:
        """Bookkeeping for an entry that has left its (class or run) queue."""
        self._best = None
        if entry is self._held:
            self._held = None
        if entry is self._lead:
            self._lead = None
        if entry.group is not None:
            runs = self._runs[entry.level]
            if self._skipped is not None and self._skipped(entry.group):
                self._skipped_count -= 1
            if not runs[entry.group]:
                del runs[entry.group]
        self._counts[entry.level] -= 1
        self._arrival_sums[entry.level] -= entry.arrival_time
        if not self._counts[entry.level]:
            self._arrival_sums[entry.level] = 0.0  # drop accumulated rounding error

    def __contains__(self, item: object) -> bool:
        return item in self._entries

    def __len__(self) -> int:
        """Requests waiting; while groups are skipped, those not in them."""
        return len(self._entries) - self._skipped_count

    def __bool__(self) -> bool:
        return len(self._entries) > self._skipped_count

    def park(self, items: Iterable[T], group: Hashable) -> None:
        """Move waiting `items` into `group`'s runs, one per class. The class queue is cut only from
        the oldest of them to its end: a group of recent arrivals costs what it moves."""
        self._best = None
        by_level: dict[int, list[_Entry[T]]] = {}
        for item in items:
            entry = self._entries[item]
            if entry.group is None:
                by_level.setdefault(entry.level, []).append(entry)
        for level, entries in by_level.items():
            moving = {id(entry) for entry in entries}
            queue = self._queues[level]
            tail = _cut_from(queue, min(map(_arrival_order, entries)))
            queue.extend(entry for entry in tail if id(entry) not in moving)
            run = self._runs[level].setdefault(group, deque())
            for entry in tail:
                if id(entry) in moving:
                    entry.group = group
                    _insort(run, entry)

    def unpark(self, group: Hashable) -> None:
        """Merge `group`'s runs back into their class queues."""
        self._best = None
        for level, runs in enumerate(self._runs):
            run = runs.pop(group, None)
            if not run:
                continue
            queue = self._queues[level]
            tail = _cut_from(queue, _arrival_order(run[0]))
            for entry in run:
                entry.group = None
            queue.extend(heapq.merge(tail, run, key=_arrival_order))

    def skip_groups(self, skipped: Callable[[Hashable], bool]) -> int:
        """Leave the runs of the groups `skipped` names out of the order until `unskip()`; returns how
        many requests they hold. A request the starvation guard held loses its hold if it is one."""
        self._skipped, self._best = skipped, None
        self._skipped_count = sum(
            len(run) for runs in self._runs for group, run in runs.items() if skipped(group)
        )
        if self._held is not None and self._held.group is not None and skipped(self._held.group):
            self._held = None
        return self._skipped_count

    def unskip(self) -> None:
        self._skipped, self._best = None, None
        self._skipped_count = 0

    def level_of(self, item: T) -> int:
        return self._entries[item].level

    def score(self, level: int, arrival_time: float) -> float:
        """Score of a request of `level` that arrived at `arrival_time`, as of this iteration."""
        return self.regulator.score(level, arrival_time, self.now)

    def scores(self, levels: Sequence[int], arrival_times: Sequence[float]) -> list[float]:
        """Scores of requests given as parallel sequences, as of this iteration."""
        return [self.score(level, arrival) for level, arrival in zip(levels, arrival_times, strict=True)]

    def _visible(self, level: int) -> Iterator[deque[_Entry[T]]]:
        """The class queue of `level` and its runs that are not skipped, the non-empty ones."""
        if self._queues[level]:
            yield self._queues[level]
        for group, run in self._runs[level].items():
            if self._skipped is None or not self._skipped(group):
                yield run

    def _class_head(self, level: int) -> _Entry[T] | None:
        """The oldest visible request of a class, parked groups included: within a class, older ranks
        first."""
        heads = [queue[0] for queue in self._visible(level)]
        self.visited += len(heads)
        return min(heads, key=_arrival_order, default=None)

    def _best_head(self) -> _Entry[T]:
        if self._lead is not None:
            return self._lead
        if self._held is not None:
            return self._held
        if self._best is not None:
            return self._best
        best, best_score = self._best_of(range(len(self._queues)))
        if best is None:
            raise IndexError("no request is waiting")
        if self._guard and best.level > 0:
            if self._fresh_score is None:  # the guard's yardstick: a lightest-class arrival
                self._fresh_score = self.regulator.score(0, self.now, self.now)
            if best_score <= self._fresh_score:
                self._held = best
        self._best = best
        return best

    def _best_of(self, levels: range) -> tuple[_Entry[T] | None, float]:
        """The best class head among `levels` (ascending score, arrival, insertion), and its score."""
        best: _Entry[T] | None = None
        best_key = (math.inf, math.inf, 0)
        scores, score = self._scores, self.regulator.score  # in one frame: a step's first look is cold
        queues = self._queues
        for level in levels:
            if self._runs[level]:
                head = self._class_head(level)
            else:  # no parked group (the usual step): the class queue's head
                self.visited += 1
                head = queues[level][0] if queues[level] else None
            if head is None:
                continue
            if (head_score := scores.get(head.seq)) is None:  # scored once an iteration
                self.visited += 1
                head_score = scores[head.seq] = score(head.level, head.arrival_time, self.now)
            key = (head_score, head.arrival_time, head.seq)
            if best is None or key < best_key:
                best, best_key = head, key
        return best, best_key[0]

    def best_heavier(self, level: int) -> T | None:
        """The request that would run first of those of classes heavier than `level`; None if none waits."""
        best, _ = self._best_of(range(level + 1, len(self._queues)))
        return None if best is None else best.item

    @property
    def leading(self) -> T | None:
        """The request that leads this iteration's order (`lead`), if one does."""
        return None if self._lead is None else self._lead.item

    def lead(self, item: T | None) -> None:
        """`item`, a waiting request, goes first for the rest of this iteration, until it leaves the
        queue; None: no request leads."""
        self._lead = None if item is None else self._entries[item]
        self._best = None

    def peek(self) -> T:
        """The request that would run next."""
        return self._best_head().item

    def pop(self) -> T:
        entry = self._best_head()
        queue = self._queue_of(entry)
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
        return [
            (entry.item, entry.level)
            for heavier in range(level + 1, len(self._queues))
            for entry in self._class(heavier)
        ]

    def _class(self, level: int) -> list[_Entry[T]]:
        """Every waiting request of a class, skipped runs included, in arrival order."""
        return list(heapq.merge(self._queues[level], *self._runs[level].values(), key=_arrival_order))

    def ordered(self) -> list[T]:
        """Every waiting request, best first: a leading request, a held one, then ascending (score,
        arrival, insertion)."""
        entries = [
            entry for level in range(len(self._queues)) for queue in self._visible(level) for entry in queue
        ]
        entries.sort(key=lambda e: (self.score(e.level, e.arrival_time), e.arrival_time, e.seq))
        order = [entry.item for entry in entries]
        for first in (self._held, self._lead):  # the lead goes before a held request
            if first is not None:
                order.remove(first.item)
                order.insert(0, first.item)
        return order

    def __iter__(self) -> Iterator[T]:
        return iter(self.ordered())


def _insort(queue: deque[_Entry[T]], entry: _Entry[T]) -> None:
    """Place `entry` in `queue` by arrival (at the end, for the usual newest arrival)."""
    if not queue or _arrival_order(queue[-1]) <= _arrival_order(entry):
        queue.append(entry)
    else:
        queue.insert(bisect.bisect_right(queue, _arrival_order(entry), key=_arrival_order), entry)


def _cut_from(queue: deque[_Entry[T]], key: tuple[float, int]) -> list[_Entry[T]]:
    """Take off the end of `queue` every entry from `key` (arrival, insertion) on, in arrival order."""
    tail: list[_Entry[T]] = []
    while queue and _arrival_order(queue[-1]) >= key:
        tail.append(queue.pop())
    tail.reverse()
    return tail
