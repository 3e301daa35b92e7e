"""Priority Regulator: per-class priority with bounded aging, queue-pressure boost, and scores."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from rps_serve.scheduling.parameters import ClassParameters, Order, Policy, PressureSettings


class QueueStats(NamedTuple):
    """One class queue at one scheduling iteration (a tuple: one is made per class every step)."""

    length: int
    mean_age_s: float


def boost_from_excess(excess: float, settings: PressureSettings) -> int:
    return round(1 + (settings.max_boost - 1) * (1 - math.exp(-settings.steepness * excess)))


class QueuePressure:
    """Tracks one class's queue length and mean age against their EMAs; yields the boost in [1, 3].

    `age_floor_s`: the EMA age a queue's mean age is compared with at least (see `PressureSettings`).
    """

    def __init__(self, settings: PressureSettings, age_floor_s: float | None = None) -> None:
        self._settings = settings
        self._age_floor_s = max(settings.min_ema_age_s, age_floor_s or 0.0)
        self._ema_length: float | None = None
        self._ema_age: float | None = None
        self.boost = 1

    def observe(self, stats: QueueStats) -> int:
        s = self._settings
        if stats.length == 0:
            self.boost = 1
            return self.boost
        if self._ema_length is None or self._ema_age is None:
            self._ema_length, self._ema_age = float(stats.length), stats.mean_age_s
        age_ratio = stats.mean_age_s / max(self._ema_age, self._age_floor_s)
        length_ratio = stats.length / max(self._ema_length, s.min_ema_length)
        excess = max(0.0, s.age_weight * (age_ratio - 1) + s.length_weight * (length_ratio - 1))
        self.boost = boost_from_excess(excess, s)
        self._ema_length += s.ema_alpha * (stats.length - self._ema_length)
        self._ema_age += s.ema_alpha * (stats.mean_age_s - self._ema_age)
        return self.boost


class PriorityRegulator:
    """Scores waiting requests of every class level under one policy; lower score runs first.

    Scores are -log(priority) for rps/static/aging, the deadline (arrival + class SLO) for edf and
    the arrival time for fcfs. Within one class every policy orders by arrival, which lets the
    Queue Manager keep one FIFO per class and merge them. `score` takes one request in plain floats
    (a scheduling step scores a handful of queue heads, where numpy's per-call cost dominates);
    `scores` takes arrays (the simulator's batches). Both evaluate `_priority`.
    """

    def __init__(
        self,
        policy: Policy,
        ladder: Sequence[ClassParameters],
        pressure: PressureSettings | None = None,
    ) -> None:
        self.policy = policy
        self.ladder = tuple(ladder)
        self._order = policy.row.order
        self._pressure = [QueuePressure(pressure or PressureSettings(), c.slo_s) for c in self.ladder]
        self._static = [c.static_priority for c in self.ladder]
        self._p = [c.p for c in self.ladder]
        self._k = [c.k for c in self.ladder]
        self._slo = [c.slo_s for c in self.ladder]
        self._boost = [1.0] * len(self.ladder)

    @property
    def num_levels(self) -> int:
        return len(self.ladder)

    def observe(self, stats: Sequence[QueueStats]) -> None:
        """Feed this iteration's per-class queue statistics; updates each class's boost."""
        if len(stats) != self.num_levels:
            raise ValueError(f"expected stats for {self.num_levels} class levels, got {len(stats)}")
        self._boost = [
            float(pressure.observe(queue)) for pressure, queue in zip(self._pressure, stats, strict=True)
        ]

    def boosts(self) -> list[int]:
        return [int(b) for b in self._boost]

    def priorities(self, levels: np.ndarray, arrivals: np.ndarray, now: float) -> np.ndarray:
        """`priority` of requests given as parallel arrays of class levels and arrival times."""
        static, p, k, boost = (
            np.asarray(values)[levels] for values in (self._static, self._p, self._k, self._boost)
        )
        waiting = np.maximum(now - arrivals, 0.0)
        return np.asarray(_priority(self._order, np.expm1, static, p, k, boost, waiting), dtype=float)

    def score(self, level: int, arrival: float, now: float) -> float:
        """Score of one request of `level` that arrived at `arrival`, at `now`."""
        if self._order is Order.ARRIVAL:
            return arrival
        if self._order is Order.DEADLINE:
            return arrival + self._slo[level]
        # In one frame: a scheduling step scores its class heads here, one call each.
        waiting = now - arrival if now > arrival else 0.0
        priority = _priority(
            self._order,
            math.expm1,
            self._static[level],
            self._p[level],
            self._k[level],
            self._boost[level],
            waiting,
        )
        return -math.log(priority) if priority > 0 else math.inf

    def scores(self, levels: np.ndarray, arrivals: np.ndarray, now: float) -> np.ndarray:
        """Scores of requests given as parallel arrays of class levels and arrival times."""
        if self._order is Order.ARRIVAL:
            return np.asarray(arrivals, dtype=float)
        if self._order is Order.DEADLINE:
            return np.asarray(arrivals + np.asarray(self._slo)[levels], dtype=float)
        with np.errstate(divide="ignore"):
            return np.asarray(-np.log(self.priorities(levels, arrivals, now)))


def _priority(
    order: Order, expm1: Callable[[Any], Any], static: Any, p: Any, k: Any, boost: Any, waiting: Any
) -> Any:
    """static + 1 - exp(-k * boost * waiting ** p), or one of its terms, as `order` has it: over floats
    (`expm1` = math.expm1) or arrays (numpy.expm1) alike."""
    if order is Order.STATIC:
        return static
    aging = -expm1(-k * boost * waiting**p)
    if order is Order.STATIC_AND_AGING:
        return static + aging
    if order is Order.AGING:
        return aging
    raise ValueError(f"{order.value} is not a priority order")


def aging(params: ClassParameters, waiting_s: float, boost: float = 1.0) -> float:
    """The aging term of `params`'s class after `waiting_s` seconds under `boost`."""
    return -math.expm1(-params.k * boost * waiting_s**params.p)


def outrank_wait_s(
    heavy: ClassParameters, light: ClassParameters, light_wait_s: float = 0.0, light_boost: float = 1.0
) -> float:
    """How long a `heavy` request must wait before it outranks a `light` one that has waited
    `light_wait_s` under boost `light_boost`, under rps.

    With boost 1 (the slowest aging) the heavy request outranks once
    S_h + 1 - exp(-k_h * w^p_h) > S_l + A_l, i.e. w > (-ln(1 - (S_l + A_l - S_h)) / k_h) ** (1 / p_h),
    A_l the light request's aging. Queue pressure only raises the heavy request's boost, so this is
    an upper bound on that wait. Infinite where aging cannot close the gap (S_l + A_l - S_h >= 1).
    """
    gap = light.static_priority + aging(light, light_wait_s, light_boost) - heavy.static_priority
    if gap <= 0:
        return 0.0
    if gap >= 1:
        return math.inf
    return float((-math.log1p(-gap) / heavy.k) ** (1 / heavy.p))


def starvation_bound_s(
    ladder: Sequence[ClassParameters], level: int, lighter_wait_s: float, max_boost: float
) -> float:
    """Longest a request at the head of class `level` ranks behind a lighter request, under rps,
    when no lighter request waits longer than `lighter_wait_s`.

    Worst case: lighter classes at the maximal boost, the heavy class at boost 1. Past this wait the
    request outranks every waiting request of a lighter class; only an older request of a heavier
    class can still rank ahead of it. Infinite when a lighter request that has waited
    `lighter_wait_s` is out of the heavy class's reach (static gap plus its aging >= 1).
    """
    heavy = ladder[level]
    return max(
        (outrank_wait_s(heavy, light, lighter_wait_s, max_boost) for light in ladder[:level]), default=0.0
    )
