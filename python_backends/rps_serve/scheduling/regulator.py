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
    """Tracks each class queue's length and mean age against their EMAs; yields each class's boost in
    [1, max_boost].

    `age_floors_s`: per class, the EMA age its mean age is compared with at least (see
    `PressureSettings`). Every class is updated in one call, the settings read once: a scheduling step
    runs this after the model's forward pass, when every object it touches is out of the caches.
    """

    def __init__(self, settings: PressureSettings, age_floors_s: Sequence[float | None]) -> None:
        self._settings = settings
        self._age_floors_s = [max(settings.min_ema_age_s, floor or 0.0) for floor in age_floors_s]
        self._ema_length: list[float | None] = [None] * len(self._age_floors_s)
        self._ema_age = [0.0] * len(self._age_floors_s)

    def observe(self, stats: Sequence[tuple[int, float]]) -> list[float]:
        """Feed one iteration's statistics, (length, mean age) per class (a `QueueStats` or a plain
        tuple); returns the classes' boosts."""
        if len(stats) != len(self._age_floors_s):
            raise ValueError(f"expected stats for {len(self._age_floors_s)} class levels, got {len(stats)}")
        s = self._settings
        alpha, min_length = s.ema_alpha, s.min_ema_length
        age_weight, length_weight = s.age_weight, s.length_weight
        ema_lengths, ema_ages, floors = self._ema_length, self._ema_age, self._age_floors_s
        boosts = []
        for level, (length, age) in enumerate(stats):
            if length == 0:  # no pressure; the EMAs stay as they were
                boosts.append(1.0)
                continue
            ema_length = ema_lengths[level]
            if ema_length is None:  # the first requests: their own history
                ema_length, ema_ages[level] = float(length), age
            ema_age = ema_ages[level]
            excess = age_weight * (age / max(ema_age, floors[level]) - 1) + length_weight * (
                length / max(ema_length, min_length) - 1
            )
            boosts.append(float(boost_from_excess(excess, s)) if excess > 0 else 1.0)
            ema_lengths[level] = ema_length + alpha * (length - ema_length)
            ema_ages[level] = ema_age + alpha * (age - ema_age)
        return boosts


class PriorityRegulator:
    """Scores waiting requests of every class level under one policy; lower score runs first.

    Scores are -log(priority) for rps/static/aging, the deadline (arrival + class SLO) for edf and the
    arrival time for fcfs. Within one class every policy orders by arrival, which lets the
    Queue Manager keep one FIFO per class and merge them. `score(level, arrival, now)` takes one
    request in plain floats (a scheduling step scores a handful of queue heads, where numpy's per-call
    cost dominates); `scores` takes arrays (the simulator's batches). Both evaluate the order's function
    of `_PRIORITY`. `score` is the order's own function, chosen once: a step calls it after the model's
    forward pass, where every lookup on the way is a cache miss.
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
        self._pressure = QueuePressure(pressure or PressureSettings(), [c.slo_s for c in self.ladder])
        self._static = [c.static_priority for c in self.ladder]
        self._p = [c.p for c in self.ladder]
        self._k = [c.k for c in self.ladder]
        self._slo = [c.slo_s for c in self.ladder]
        self._boost = [1.0] * len(self.ladder)
        # Only an aging term reads the queue-pressure boost: the other orders skip its update.
        self.ages = self._order in (Order.AGING, Order.STATIC_AND_AGING)
        self._priority_of = _PRIORITY.get(self._order)
        scorers = {Order.ARRIVAL: self._arrival_score, Order.DEADLINE: self._deadline_score}
        self.score: Callable[[int, float, float], float] = scorers.get(self._order, self._priority_score)

    @property
    def num_levels(self) -> int:
        return len(self.ladder)

    def observe(self, stats: Sequence[tuple[int, float]]) -> None:
        """Feed this iteration's per-class queue statistics (`QueuePressure.observe`); updates each
        class's boost."""
        self._boost = self._pressure.observe(stats)

    def boosts(self) -> list[int]:
        return [int(b) for b in self._boost]

    def priorities(self, levels: np.ndarray, arrivals: np.ndarray, now: float) -> np.ndarray:
        """`priority` of requests given as parallel arrays of class levels and arrival times."""
        static, p, k, boost = (
            np.asarray(values)[levels] for values in (self._static, self._p, self._k, self._boost)
        )
        if self._priority_of is None:
            raise ValueError(f"{self._order.value} is not a priority order")
        waiting = np.maximum(now - arrivals, 0.0)
        return np.asarray(self._priority_of(np.expm1, static, p, k, boost, waiting), dtype=float)

    def _arrival_score(self, level: int, arrival: float, now: float) -> float:
        return arrival

    def _deadline_score(self, level: int, arrival: float, now: float) -> float:
        return arrival + self._slo[level]

    def _priority_score(self, level: int, arrival: float, now: float) -> float:
        assert self._priority_of is not None
        waiting = now - arrival if now > arrival else 0.0
        priority = self._priority_of(
            math.expm1, self._static[level], self._p[level], self._k[level], self._boost[level], waiting
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


# The priority of a request under each priority order, static + 1 - exp(-k * boost * waiting ** p) or
# one of its terms, over floats (`expm1` = math.expm1) or arrays (numpy.expm1) alike.
_Expm1 = Callable[[Any], Any]


def _static(expm1: _Expm1, static: Any, p: Any, k: Any, boost: Any, waiting: Any) -> Any:
    return static


def _aging(expm1: _Expm1, static: Any, p: Any, k: Any, boost: Any, waiting: Any) -> Any:
    return -expm1(-k * boost * waiting**p)


def _static_and_aging(expm1: _Expm1, static: Any, p: Any, k: Any, boost: Any, waiting: Any) -> Any:
    return static - expm1(-k * boost * waiting**p)


_PRIORITY: dict[Order, Callable[..., Any]] = {
    Order.STATIC: _static,
    Order.AGING: _aging,
    Order.STATIC_AND_AGING: _static_and_aging,
}


def aging(params: ClassParameters, waiting_s: float, boost: float = 1.0) -> float:
    """The aging term of `params`'s class after `waiting_s` seconds under `boost`."""
    return float(_aging(math.expm1, params.static_priority, params.p, params.k, boost, waiting_s))


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
