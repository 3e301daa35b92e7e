"""Routers in front of engine replicas: each picks a replica from what it can observe at an arrival.

- `round-robin`: the next replica in turn, whatever its load (a Kubernetes Service today);
- `least-outstanding`: the replica with the fewest requests routed to it and not finished;
- `least-queue`: the replica with the fewest requests routed to it that have not produced their first
  token, whatever their class, then the fewest outstanding: the llm-d router's default pick, whose
  queue scorer prefers the fewest waiting requests (its KV-cache scorer beside it breaks ties by load).
  The router there reads the engine's waiting gauge at its last scrape, which leaves out the requests
  in their prefill or still in the front end; here it counts them, as `class-aware` does, so that the
  two differ only in the class;
- `class-aware`: the replica with the fewest requests that would be served before the new one, i.e.
  the requests of a lighter or equal class routed to it that have not produced their first token
  (the sum of `vllm_model`'s `rps_queue_depth` over those classes), then the fewest outstanding.

Every router scans the replicas starting from the one after its last pick, and takes the first
replica of least load in that order: round-robin takes the first outright, and the others break ties
by rotation, so requests spread over replicas of equal load instead of piling on the lowest index.
"""

from __future__ import annotations

import enum


class Routing(enum.Enum):
    ROUND_ROBIN = "round-robin"
    LEAST_OUTSTANDING = "least-outstanding"
    LEAST_QUEUE = "least-queue"
    CLASS_AWARE = "class-aware"


class Backlog:
    """What a router knows of its replicas, kept from the requests it routed and the responses it saw.

    `outstanding[r]`: requests routed to replica `r` that have not finished; `waiting[r][level]`: those
    of class `level` that have not produced their first token (in the front end, the class queue or
    their prefill), as `vllm_model` exports them per class.
    """

    def __init__(self, replicas: int, num_levels: int) -> None:
        self.outstanding = [0] * replicas
        self.waiting = [[0] * num_levels for _ in range(replicas)]

    def routed(self, replica: int, level: int) -> None:
        self.outstanding[replica] += 1
        self.waiting[replica][level] += 1

    def first_token(self, replica: int, level: int) -> None:
        self.waiting[replica][level] -= 1

    def finished(self, replica: int) -> None:
        self.outstanding[replica] -= 1

    def ahead_of(self, replica: int, level: int) -> int:
        """Requests waiting for their first token on `replica` that a request of `level` would be
        served after: those of classes up to `level`."""
        return sum(self.waiting[replica][: level + 1])

    def queued(self, replica: int) -> int:
        """Requests waiting for their first token on `replica`, of every class."""
        return sum(self.waiting[replica])


class Router:
    """Picks the replica of each request under `routing`, scanning from the one after its last pick."""

    def __init__(self, routing: Routing, replicas: int) -> None:
        if replicas < 1:
            raise ValueError(f"need at least one replica, got {replicas}")
        self.routing = routing
        self.replicas = replicas
        self._next = 0

    def choose(self, level: int, backlog: Backlog) -> int:
        """The replica for a request of class `level`, given the backlog at its arrival."""
        scan = [(self._next + k) % self.replicas for k in range(self.replicas)]
        if self.routing is Routing.ROUND_ROBIN:
            pick = scan[0]
        elif self.routing is Routing.LEAST_OUTSTANDING:
            pick = min(scan, key=lambda r: backlog.outstanding[r])
        elif self.routing is Routing.LEAST_QUEUE:
            pick = min(scan, key=lambda r: (backlog.queued(r), backlog.outstanding[r]))
        else:
            pick = min(scan, key=lambda r: (backlog.ahead_of(r, level), backlog.outstanding[r]))
        self._next = (pick + 1) % self.replicas
        return pick
