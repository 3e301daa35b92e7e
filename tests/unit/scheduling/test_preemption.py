from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rps_serve.scheduling.parameters import Policy
from rps_serve.scheduling.preemption import Contender, PreemptionRule

RULE = PreemptionRule(margin=math.log(2.0), max_preemptions=2)

contenders = st.builds(
    Contender,
    level=st.integers(0, 4),
    score=st.floats(-5.0, 50.0) | st.just(math.inf),
    arrival_time=st.floats(0.0, 1000.0),
    num_preemptions=st.integers(0, 3),
)


def test_sand_evicts_a_fresh_rock() -> None:
    sand = Contender(level=0, score=-math.log(0.1), arrival_time=10.0)
    rock = Contender(level=2, score=math.inf, arrival_time=5.0)
    assert RULE.may_evict(sand, rock)


def test_no_eviction_within_a_class_or_upwards() -> None:
    sand = Contender(level=0, score=2.3, arrival_time=10.0)
    old_sand = Contender(level=0, score=9.0, arrival_time=1.0)
    rock = Contender(level=2, score=0.1, arrival_time=0.0)
    assert not RULE.may_evict(sand, old_sand)
    assert not RULE.may_evict(rock, sand)


def test_margin_protects_near_equal_priorities() -> None:
    sand = Contender(level=0, score=-math.log(0.1), arrival_time=10.0)
    aged_rock = Contender(level=2, score=-math.log(0.06), arrival_time=0.0)  # 0.1 / 0.06 < 2
    assert not RULE.may_evict(sand, aged_rock)


def test_preemption_count_caps_evictions() -> None:
    sand = Contender(level=0, score=2.3, arrival_time=10.0)
    assert not RULE.may_evict(sand, Contender(level=2, score=math.inf, arrival_time=0.0, num_preemptions=2))


def test_victim_is_the_worst_score_latest_arrival() -> None:
    sand = Contender(level=0, score=2.3, arrival_time=10.0)
    running = [
        ("pebble", Contender(level=1, score=5.0, arrival_time=1.0)),
        ("rock-old", Contender(level=2, score=math.inf, arrival_time=2.0)),
        ("rock-new", Contender(level=2, score=math.inf, arrival_time=3.0)),
        ("sand", Contender(level=0, score=99.0, arrival_time=0.0)),
    ]
    assert RULE.choose_victim(sand, running) == "rock-new"
    assert RULE.choose_victim(sand, running[3:]) is None


def test_fcfs_never_preempts() -> None:
    assert PreemptionRule.for_policy(Policy.FCFS) is None
    assert PreemptionRule.for_policy(Policy.RPS) is not None


@given(a=contenders, b=contenders)
def test_two_requests_cannot_evict_each_other(a: Contender, b: Contender) -> None:
    assert not (RULE.may_evict(a, b) and RULE.may_evict(b, a))


@settings(max_examples=300, deadline=None)
@given(
    waiting=st.tuples(st.integers(0, 2), st.sampled_from([0.0, 1.0, 2.0])),
    running=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from([0.5, 1.0, 3.0, 4.0]),
            st.sampled_from([0.0, 1.0]),
            st.integers(0, 3),
        ),
        max_size=12,
    ),
)
def test_the_vectorized_victim_is_the_one_choose_victim_picks(
    waiting: tuple[int, float], running: list[tuple[int, float, float, int]]
) -> None:
    rule = PreemptionRule(margin=0.5)
    contender = Contender(waiting[0], waiting[1], 0.0)
    contenders = [(i, Contender(*row)) for i, row in enumerate(running)]
    columns = [np.array([r[k] for r in running]) for k in range(4)]
    assert rule.victim_position(contender, *columns) == rule.choose_victim(contender, contenders)
