"""vLLM's `RequestQueue` interface over the Queue Manager's per-class queues."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import NamedTuple

from vllm.v1.core.sched.request_queue import RequestQueue
from vllm.v1.request import Request

from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.regulator import PriorityRegulator


class Ranked(NamedTuple):
    """Where a request ranks, fixed when it first arrives: its class level, and the time it ranks
    from inside its class (its arrival, or later under a cost order: `SchedulingVariant.rank_time`)."""

    level: int
    since: float


class ClassRequestQueue(RequestQueue):
    """Waiting requests in per-class queues, handed out in RPS priority order.

    vLLM "prepends" requests it could not schedule or has preempted; here every request is placed
    by its rank time inside its class, which puts those back near the head of their class.
    A request's class and rank time (`classify`) are computed once, when it first arrives, and
    remembered for its lifetime.
    `group_of` names the group a request joins the queue in (`ClassQueues.park`), given its level.
    """

    def __init__(
        self,
        regulator: PriorityRegulator,
        classify: Callable[[Request], Ranked],
        group_of: Callable[[Request, int], Hashable | None] | None = None,
    ) -> None:
        # The scheduler calls `classes.begin_iteration()` itself, a step's first call.
        self.classes: ClassQueues[Request] = ClassQueues(regulator, clock=time.time)
        self._classify = classify
        self._group_of = group_of
        self._ranked: weakref.WeakKeyDictionary[Request, Ranked] = weakref.WeakKeyDictionary()
        # While set (for one `schedule()`), the queue reads as empty when its best request may not
        # start now: vLLM's loop then ends its admissions, as at a request the cache cannot hold.
        self.admits: Callable[[Request], bool] | None = None

    def ranked(self, request: Request) -> Ranked:
        """Class level and rank time of a request this queue has seen (waiting or not)."""
        try:
            return self._ranked[request]
        except KeyError:
            ranked = self._ranked[request] = self._classify(request)
            return ranked

    def level(self, request: Request) -> int:
        """Class level of a request this queue has seen: a step asks it for every request it
        weighs, so a known request's is read in this frame."""
        try:
            return self._ranked[request].level
        except KeyError:
            return self.ranked(request).level

    def add_request(self, request: Request) -> None:
        level, since = self.ranked(request)
        group = None if self._group_of is None else self._group_of(request, level)
        self.classes.add(request, level, since, group)

    def pop_request(self) -> Request:
        return self.classes.pop()

    def peek_request(self) -> Request:
        return self.classes.peek()

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            self.add_request(request)

    def remove_request(self, request: Request) -> None:
        self.classes.remove(request)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        for request in requests:
            if request in self.classes:
                self.classes.remove(request)

    def __getitem__(self, index: int) -> Request:
        """The waiting request at `index` in priority order: vLLM's FCFS queue is a deque, and callers
        (vLLM's own tests among them) index it."""
        return self.classes.ordered()[index]

    def __bool__(self) -> bool:
        if self.admits is None:
            return bool(self.classes)
        while self.classes:
            head = self.classes.peek()
            if self.admits(head):
                return True
            if head is not self.classes.leading:
                return False
            self.classes.lead(None)  # a light step's lead that may not start goes back to its place
        return False

    def __len__(self) -> int:
        return len(self.classes)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.classes.ordered())
