"""Scale-out: `N` colocated replicas of one deployment behind a router, simulated in lockstep.

Each replica is what `simulate` runs (colocated layout): its own front-end workers, in arrival order
under the stock policies and in (class level, arrival) order under the class-aware ones, and its own
engine. The router sees each request at its arrival and picks a replica (`sim.routing`) from what a
router can know at that moment: the requests it routed there, and the first tokens and finishes that
have come back by then (a token sampled at the end of an engine step comes back when the step ends,
so the step in progress at the arrival is not yet seen). Replicas advance together in arrival order:
every replica is run to the arrival time, the router picks, the request goes to that replica's front
end; after the last arrival every replica runs until it has finished its requests.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from rps_harness.metrics import RequestRecords
from rps_harness.sim.engine import Engine, StepRecord
from rps_harness.sim.frontend import WorkerPool
from rps_harness.sim.routing import Backlog, Router, Routing
from rps_harness.sim.simulator import Deployment, PolicyVariant, engine_for, trace_records
from rps_harness.workload.trace import Trace


@dataclass(frozen=True)
class ClusterOutcome:
    """Per-request records and replica (`replica`, and `ready_s`: when its engine saw it), and per
    replica the requests routed to it, its busy fraction over the cluster's makespan, its engine's
    preemptions and steps."""

    records: RequestRecords
    replica: np.ndarray
    ready_s: np.ndarray
    routed: np.ndarray
    utilization: np.ndarray
    preemptions: np.ndarray
    steps: np.ndarray
    makespan_s: float


class _Replica:
    """One replica's front end and engine, advanced together; keeps the engine's steps not yet seen
    by the router."""

    def __init__(
        self, make_engine: Callable[[Callable[[StepRecord], None]], Engine], workers: int, ready_s: np.ndarray
    ) -> None:
        self.unseen: deque[StepRecord] = deque()
        self.engine = make_engine(self.unseen.append)
        self.front_end = WorkerPool(workers)
        self._preprocessed: list[tuple[float, int]] = []  # heap of (finish time, request)
        self._ready_s = ready_s

    def submit(self, request: int, arrival_s: float, service_s: float, level: int) -> None:
        for _, ready in self.front_end.submit(request, arrival_s, service_s, level):
            heapq.heappush(self._preprocessed, (ready, request))

    def _hand_over(self, t: float) -> None:
        """Hand the engine, in order, every request its front end has finished by `t`."""
        for request, ready in self.front_end.advance(t):
            heapq.heappush(self._preprocessed, (ready, request))
        while self._preprocessed and self._preprocessed[0][0] <= t:
            ready, request = heapq.heappop(self._preprocessed)
            self.engine.run_until(ready)
            self.engine.add(request)
            self._ready_s[request] = ready

    def advance(self, t: float) -> None:
        self._hand_over(t)
        self.engine.run_until(t)

    def seen_by(self, t: float) -> list[StepRecord]:
        """The steps that ended by `t` and were not yet seen."""
        seen = []
        while self.unseen and self.unseen[0].start_s + self.unseen[0].duration_s <= t:
            seen.append(self.unseen.popleft())
        return seen

    def finish(self) -> None:
        self._hand_over(math.inf)
        self.engine.drain()


def simulate_cluster(
    trace: Trace,
    levels: np.ndarray,
    num_levels: int,
    variant: PolicyVariant,
    deployment: Deployment,
    replicas: int,
    routing: Routing,
) -> ClusterOutcome:
    """Run `trace` through `replicas` copies of the deployment under `variant` behind a `routing`
    router, with class level `levels[i]` for request i."""
    if variant.modserve:
        raise ValueError("the cluster runs colocated replicas only")
    router = Router(routing, replicas)
    n, gpus = len(trace), deployment.gpus
    prep = deployment.preprocess
    service = prep.seconds(trace.modality, trace.prompt_tokens, trace.modality_tokens).tolist()
    front_levels = [0] * n if variant.policy.is_stock else levels.tolist()
    level_list = levels.tolist()
    encoder_s = deployment.timing(gpus).encoder_s(trace.modality, trace.modality_tokens)
    unknown = np.full(n, np.nan)  # no ready times up front: each engine gets its requests from `add`
    ready_s = np.full(n, np.nan)
    make_engine = partial(
        engine_for, trace, unknown, encoder_s, levels, num_levels, variant, deployment, gpus
    )
    members = [_Replica(make_engine, prep.workers, ready_s) for _ in range(replicas)]

    backlog = Backlog(replicas, num_levels)
    chosen = np.empty(n, dtype=np.int64)
    for request, arrival in enumerate(trace.arrival_s.tolist()):
        for index, member in enumerate(members):
            member.advance(arrival)
            for step in member.seen_by(arrival):
                for first in step.first_token_ids:
                    backlog.first_token(index, level_list[first])
                for _ in step.finished_ids:
                    backlog.finished(index)
        pick = router.choose(level_list[request], backlog)
        backlog.routed(pick, level_list[request])
        members[pick].submit(request, arrival, service[request], front_levels[request])
        chosen[request] = pick
    for member in members:
        member.finish()

    first_token_s, finish_s = np.full(n, np.nan), np.full(n, np.nan)
    for index, member in enumerate(members):
        mine = chosen == index
        first_token_s[mine] = member.engine.first_token[mine]
        finish_s[mine] = member.engine.finish[mine]
    records = trace_records(trace, first_token_s, finish_s, levels, num_levels)
    makespan = records.makespan_s
    busy = np.array([member.engine.busy_s for member in members])
    return ClusterOutcome(
        records=records,
        replica=chosen,
        ready_s=ready_s,
        routed=np.bincount(chosen, minlength=replicas),
        utilization=busy / makespan if makespan > 0 else np.zeros(replicas),
        preemptions=np.array([int(member.engine.preemptions.sum()) for member in members]),
        steps=np.array([member.engine.steps for member in members]),
        makespan_s=makespan,
    )
