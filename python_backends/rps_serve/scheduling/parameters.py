"""Policies and per-class parameters of the Priority Regulator."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from rps_serve.profiles.reference import isolated_ttft_slo_s
from rps_serve.requests import Modality, RequestClass

# Threads that decode a request's media and render its input before the engine, taking requests in
# class order under the class-aware policies: `vllm_model`'s default (`front_end_workers`), and the
# simulator's.
FRONT_END_WORKERS = 2


class Policy(enum.Enum):
    """How waiting requests are ordered; what each policy does is its row of `POLICY_TABLE`. Every
    one can be served (model.json's `policy`): the shipped one, the paper's policy and its ablations
    (to reproduce its figures), and stock vLLM's as the baselines. Orders tried in the simulator and
    lost leave the code (docs/decisions.md lists them); a trial lives in the simulator's variants.

    - rps: static class priority plus bounded aging (the paper's policy);
    - static: static class priority only, FCFS inside a class;
    - aging: the aging term only (no static priority);
    - edf: earliest deadline first, deadline = arrival + the class SLO;
    - fcfs: arrival order, classes ignored (vLLM's default);
    - vllm-priority: stock vLLM's `priority` policy with each request's priority = its class level:
      static class order, no aging, and a waiting request never preempts a running one;
    - modality-priority: stock vLLM's `priority` policy with the modality as the priority (text 0,
      image 1, video 2), what a vLLM user configures without RPS-Serve at all;
    - headroom: class order, arrival inside a class, no aging and no eviction for a waiting request;
      a request of the heaviest class starts only where a share of the KV cache stays free after it
      (`scheduling.admission`).
    """

    RPS = "rps"
    STATIC = "static"
    AGING = "aging"
    EDF = "edf"
    FCFS = "fcfs"
    VLLM_PRIORITY = "vllm-priority"
    MODALITY_PRIORITY = "modality-priority"
    HEADROOM = "headroom"

    @property
    def row(self) -> PolicyRow:
        return POLICY_TABLE[self]

    @property
    def is_stock(self) -> bool:
        """Run by vLLM's own scheduler (the baselines), not the RPS plug-in."""
        return self.row.stock

    @property
    def is_stock_priority(self) -> bool:
        """Stock vLLM's priority policy, over our classes or the modalities: the one line of vLLM
        configuration a user picks instead of RPS-Serve, so the baseline every candidate must beat."""
        return self.row.stock and self.row.by_class

    def request_priority(self, level: int, modality: Modality) -> int:
        """The `priority` a request carries into vLLM: its modality under modality-priority, else its
        class level (stock vLLM's priority policy orders by it; FCFS ignores it; the RPS scheduler
        sets its own)."""
        return modality.index if self.row.by_modality else level

    @classmethod
    def parse(cls, name: str) -> Policy:
        try:
            return cls(name.strip().lower())
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise ValueError(f"unknown policy {name!r}; expected one of {known}") from None


class Order(enum.Enum):
    """What orders a policy's waiting requests (`PriorityRegulator.scores`)."""

    ARRIVAL = "arrival"
    DEADLINE = "deadline"  # arrival + the class SLO
    STATIC = "static"  # the class's static priority, arrival inside a class
    AGING = "aging"  # the aging term alone
    STATIC_AND_AGING = "static and aging"


@dataclass(frozen=True)
class PolicyRow:
    """One policy's behaviour. `stock`: vLLM's own scheduler runs it (a baseline), not the plug-in;
    `by_modality`: the levels it orders by are the modalities, not the classes; `eviction_margin`:
    how much better a waiting request must score than a running one of a heavier class to evict it
    (score units: -log(priority), ln 2 = twice the priority; seconds for EDF), None where no waiting
    request evicts a running one; `starvation_guard`: a head that waited for KV blocks keeps its
    turn (`scheduling.queues`); `kv_reserve`: the share of the KV cache the heaviest class's admission
    leaves free (`scheduling.admission`), 0 for none."""

    order: Order
    stock: bool = False
    by_modality: bool = False
    eviction_margin: float | None = None
    starvation_guard: bool = False
    kv_reserve: float = 0.0

    @property
    def by_class(self) -> bool:
        """Whether the classes order the queue (the plug-in's holds, light steps and chunk caps apply)."""
        return self.order is not Order.ARRIVAL

    @property
    def vllm_policy(self) -> str:
        """vLLM's `scheduling_policy` underneath: `fcfs` for arrival order under stock vLLM, else
        `priority` (the plug-in runs on it, so that vLLM's own preemption evicts the heaviest class)."""
        return "fcfs" if self.stock and self.order is Order.ARRIVAL else "priority"


_TWICE = math.log(2.0)
# The KV headroom the heaviest class's admission leaves: chosen on the policy table (docs/decisions.md).
KV_RESERVE = 0.05
# The cost order's factor (`SchedulingVariant.cost_order`): a request is passed inside its class only by
# requests arriving within 20x the difference of their estimated prefills; tried at 1, 4, 20 and 1,000
# in the simulator before it became a row (docs/decisions.md).
COST_ORDER = 20.0
# The policy that ships: every default of the code (model.json without a policy, `RPSConfig`, the
# commands' policy lists) names it; why it, docs/decisions.md.
SHIPPED_POLICY = Policy.HEADROOM
POLICY_TABLE: dict[Policy, PolicyRow] = {
    Policy.RPS: PolicyRow(Order.STATIC_AND_AGING, eviction_margin=_TWICE, starvation_guard=True),
    Policy.STATIC: PolicyRow(Order.STATIC, eviction_margin=_TWICE),
    Policy.AGING: PolicyRow(Order.AGING, eviction_margin=_TWICE),
    Policy.EDF: PolicyRow(Order.DEADLINE, eviction_margin=0.0),
    Policy.FCFS: PolicyRow(Order.ARRIVAL, stock=True),
    Policy.VLLM_PRIORITY: PolicyRow(Order.STATIC, stock=True),
    Policy.MODALITY_PRIORITY: PolicyRow(Order.STATIC, stock=True, by_modality=True),
    Policy.HEADROOM: PolicyRow(Order.STATIC, kv_reserve=KV_RESERVE),
}


@dataclass(frozen=True)
class ClassParameters:
    """Priority_r = static_priority + 1 - exp(-k * boost * waiting_s ** p); `slo_s` is the EDF deadline."""

    static_priority: float
    p: float
    k: float
    slo_s: float

    def __post_init__(self) -> None:
        if self.static_priority < 0 or self.p <= 0 or self.k <= 0 or self.slo_s <= 0:
            raise ValueError(f"invalid class parameters {self}")


_SLO = isolated_ttft_slo_s()

# The paper's Priority Regulator parameters (RPS-Serve, arXiv 2603.26498). SLOs: isolated P99 TTFT of the
# class's typical modality.
PAPER_PARAMETERS: dict[RequestClass, ClassParameters] = {
    RequestClass.SAND: ClassParameters(0.1, 3.5, 0.05, _SLO[Modality.TEXT]),
    RequestClass.PEBBLES: ClassParameters(0.05, 2.5, 0.003, _SLO[Modality.IMAGE]),
    RequestClass.ROCKS: ClassParameters(0.0, 1.1, 0.00075, _SLO[Modality.VIDEO]),
}


def _between(light: float, heavy: float, t: float, log_scale: bool) -> float:
    if t in (0.0, 1.0):
        return light if t == 0.0 else heavy  # anchors exactly, free of rounding
    if log_scale:
        return math.exp((1 - t) * math.log(light) + t * math.log(heavy))
    return (1 - t) * light + t * heavy


def class_ladder(
    num_levels: int, anchors: dict[RequestClass, ClassParameters] = PAPER_PARAMETERS
) -> tuple[ClassParameters, ...]:
    """Parameters for every class level when the classifier has `num_levels` clusters.

    Level l sits at t = l / (num_levels - 1) on a ladder through sand (t=0), pebbles (t=0.5) and
    rocks (t=1); each parameter is interpolated piecewise between the two nearest anchors, the rate k
    and the SLO geometrically (they span orders of magnitude). Three levels give the anchors exactly.
    """
    if num_levels < 2:
        raise ValueError(f"need at least 2 class levels, got {num_levels}")
    points = [
        (0.0, anchors[RequestClass.SAND]),
        (0.5, anchors[RequestClass.PEBBLES]),
        (1.0, anchors[RequestClass.ROCKS]),
    ]
    ladder = []
    for level in range(num_levels):
        t = level / (num_levels - 1)
        (t0, lo), (t1, hi) = (points[0], points[1]) if t <= 0.5 else (points[1], points[2])
        u = (t - t0) / (t1 - t0)
        ladder.append(
            ClassParameters(
                static_priority=_between(lo.static_priority, hi.static_priority, u, log_scale=False),
                p=_between(lo.p, hi.p, u, log_scale=False),
                k=_between(lo.k, hi.k, u, log_scale=True),
                slo_s=_between(lo.slo_s, hi.slo_s, u, log_scale=True),
            )
        )
    return tuple(ladder)


def in_time_units(ladder: tuple[ClassParameters, ...], time_scale: float) -> tuple[ClassParameters, ...]:
    """`ladder` on a clock that runs `time_scale` times slower: the paper's (p, k) are tuned to H100
    latencies of LLaVA-OneVision-7B, and on a model or machine whose prefills take `time_scale` times as
    long, every wait of the same weight takes that much longer too. Aging after w seconds is then the
    paper's aging after w / time_scale, i.e. k becomes k / time_scale**p, and each SLO scales with it.
    1 leaves the ladder as it is."""
    if not time_scale > 0:
        raise ValueError(f"time_scale must be positive, got {time_scale}")
    if time_scale == 1.0:
        return ladder
    return tuple(
        ClassParameters(c.static_priority, c.p, c.k / time_scale**c.p, c.slo_s * time_scale) for c in ladder
    )


@dataclass(frozen=True)
class PressureSettings:
    """Queue-pressure boost: excess = max(0, age_weight*(age/ema_age - 1) + length_weight*(len/ema_len - 1)).

    boost = round(1 + (max_boost - 1) * (1 - exp(-steepness * excess))), EMAs with `ema_alpha`.
    The ratios are taken against at least `min_ema_length` requests and the larger of `min_ema_age_s`
    and the class's SLO, so that a queue that was idle does not read its first arrival as maximal
    pressure: a rock that waited 0.2 s is not under pressure, whatever the EMA of an empty queue says.
    The EMAs follow a class's queue while it holds requests; an empty queue has no pressure and leaves
    them as they were (else a usually empty queue's EMAs decay to nothing between its arrivals).
    """

    ema_alpha: float = 0.004
    age_weight: float = 0.7
    length_weight: float = 0.3
    steepness: float = 2.0
    max_boost: float = 3.0
    min_ema_length: float = 1.0
    min_ema_age_s: float = 0.1
