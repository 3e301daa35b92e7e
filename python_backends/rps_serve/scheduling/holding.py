"""Decode hold: a heavy request waits, briefly, for the lighter requests running beside it to finish.

Every request in the engine waits for each step to end, and a step that runs a heavy request's vision
encoder or a long prefill chunk lasts tens of decode steps (on the CPU stack ~350 ms against ~6 ms).
Class order admits sand while heavier requests wait, so more light requests are decoding when the
heavy one starts than under arrival order, and each of them sits through its long steps: the time
per output token pays for the first-token time that class order wins.

A held request stays out of the engine until the lighter requests that were running when its hold
began have finished, or until `max_hold_s` has passed, whichever comes first; light requests that
arrive during the hold do not extend it. A request is held once at most, so the hold adds at most
`max_hold_s` to any request's wait (and to the starvation bound).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, MutableMapping, MutableSet
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from rps_serve.scheduling.queues import ClassQueues

R = TypeVar("R", bound=Hashable)


@dataclass
class Hold:
    """One request's hold: when it began, and the lighter requests it waits for."""

    since: float
    waiting_for: frozenset[Hashable]
    released: bool = False

    @classmethod
    def begin(cls, level: int, running: Mapping[Hashable, int], now: float) -> Hold:
        """A hold for a request of class `level`, given the running requests' classes; one with
        nobody lighter running is released from the start."""
        lighter = frozenset(key for key, running_level in running.items() if running_level < level)
        return cls(now, lighter, released=not lighter)

    @classmethod
    def released_at(cls, now: float) -> Hold:
        """A request that is never held (a text, where only media are)."""
        return cls(now, frozenset(), released=True)

    def keeps(self, running: Collection[Hashable], now: float, max_hold_s: float) -> bool:
        """Whether the request still sits out this step; once released it never is again."""
        if not self.released and (now - self.since >= max_hold_s or self.waiting_for.isdisjoint(running)):
            self.released = True
        return not self.released


@dataclass(eq=False)
class _Cohort:
    """The requests of one class whose holds began at the same step: they share one `Hold` (it
    depends on the class, the running requests and the time only)."""

    key: int
    level: int
    hold: Hold


class DecodeHolds(Generic[R]):
    """Every waiting request's hold, at a cost per step that does not grow with the queue.

    A request's hold is decided at the first step that finds it waiting beside a lighter running
    request; requests of one class decided at the same step form a cohort with one hold, so a step
    decides each request once in its life and checks one hold per cohort in force, not one per
    waiting request. The queue keeps a cohort's requests together (a group, by its key) while its
    hold is in force. `checks` counts holds decided and checked, for tests that show the work.

    Requests are remembered weakly (a finished request leaves without a call), unless `weak` is
    False: the simulator's requests are integers, which cannot be referenced weakly.
    """

    def __init__(self, max_hold_s: float, num_levels: int, weak: bool = True) -> None:
        self.max_hold_s = max_hold_s
        self._cohorts: MutableMapping[R, _Cohort | None] = weakref.WeakKeyDictionary() if weak else {}
        self._undecided: list[MutableSet[R]] = [
            weakref.WeakSet() if weak else set() for _ in range(num_levels)
        ]
        self._active: list[list[_Cohort]] = [[] for _ in range(num_levels)]
        self._maybe_undecided = False  # False once the undecided sets were found empty, until an arrival
        self._in_force: set[int] = set()
        self._keys = itertools.count()
        self.checks = 0

    def arrived(self, request: R, level: int, exempt: bool) -> int | None:
        """A request joins the waiting queue (again, after a preemption): the group it waits in, that
        of its cohort while that cohort's hold lasts; an exempt request is never held."""
        if request in self._cohorts:
            cohort = self._cohorts[request]
            return cohort.key if cohort is not None and not cohort.hold.released else None
        if exempt or level == 0:  # nothing is lighter than the lightest class
            self._cohorts[request] = None
        else:
            self._undecided[level].add(request)
            self._maybe_undecided = True
        return None

    def pending(self) -> bool:
        """Whether a step has holds to decide or to check (else `step` would find nothing to do). The
        undecided sets are looked at only while arrivals may have left some (a weak set's length is
        a Python call: most steps have none to decide)."""
        if self._maybe_undecided:
            self._maybe_undecided = any(self._undecided)
        return self._maybe_undecided or any(self._active)

    def step(
        self, running: Mapping[Hashable, int], now: float, waiting: Callable[[R], bool]
    ) -> tuple[list[tuple[int, list[R]]], list[int]]:
        """For a step that runs `running` (request -> class level): decide the holds of waiting
        requests first found heavier than a running one, and check every hold in force. Returns the
        cohorts begun (their groups and requests) and the groups whose hold has ended."""
        lightest = min(running.values(), default=len(self._active))
        begun: list[tuple[int, list[R]]] = []
        ended: list[int] = []
        self._in_force.clear()
        for level in range(lightest + 1, len(self._active)):
            if (cohort := self._decide(level, running, now, waiting)) is not None:
                begun.append(cohort)
            self.checks += len(self._active[level])
            for cohort_ in self._active[level]:
                if cohort_.hold.keeps(running.keys(), now, self.max_hold_s):
                    self._in_force.add(cohort_.key)
                else:
                    ended.append(cohort_.key)
            self._active[level] = [c for c in self._active[level] if not c.hold.released]
        return begun, ended

    def _decide(
        self, level: int, running: Mapping[Hashable, int], now: float, waiting: Callable[[R], bool]
    ) -> tuple[int, list[R]] | None:
        """The cohort of the waiting requests of `level` not yet decided, if its hold holds them."""
        pending = [request for request in self._undecided[level] if waiting(request)]
        self._undecided[level].clear()  # those no longer waiting are decided if they come back
        if not pending:
            return None
        self.checks += len(pending)
        cohort = _Cohort(next(self._keys), level, Hold.begin(level, running, now))
        for request in pending:
            self._cohorts[request] = cohort
        if cohort.hold.released:
            return None
        self._active[level].append(cohort)
        return cohort.key, pending

    def in_force(self, group: Hashable) -> bool:
        """Whether the requests of `group` sit out the current step."""
        return group in self._in_force

    @contextmanager
    def applied(
        self, queues: ClassQueues[R], running: Callable[[], Mapping[Hashable, int]], now: float
    ) -> Iterator[int]:
        """For one step of an engine whose waiting requests are `queues` and which runs `running()`
        (request key -> class level, asked for only when a hold is pending): the held requests sit
        out, as parked groups `queues` skips whole; yields how many sit out. The vLLM plug-in and the
        simulator both call this, so they hold the same requests at the same steps."""
        classes = running() if self.pending() and queues else None
        if not classes:
            yield 0
            return
        begun, ended = self.step(classes, now, queues.__contains__)
        for group in ended:
            queues.unpark(group)
        for group, requests in begun:
            queues.park(requests, group)
        try:
            yield queues.skip_groups(self.in_force)
        finally:
            queues.unskip()
