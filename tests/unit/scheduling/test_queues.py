"""Queue Manager: bookkeeping, and ordering properties checked with hypothesis."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rps_serve.requests import RequestClass
from rps_serve.scheduling.parameters import PAPER_PARAMETERS, Policy, PressureSettings, class_ladder
from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.regulator import PriorityRegulator, QueueStats, outrank_wait_s, starvation_bound_s


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _queues(
    policy: Policy = Policy.RPS, num_levels: int = 3, now: float = 0.0
) -> tuple[ClassQueues[str], Clock]:
    clock = Clock(now)
    return ClassQueues(PriorityRegulator(policy, class_ladder(num_levels)), clock=clock), clock


def test_bookkeeping() -> None:
    queues, clock = _queues()
    queues.add("a", RequestClass.SAND, 0.0)
    queues.add("b", RequestClass.ROCKS, 1.0)
    queues.add("c", RequestClass.ROCKS, 2.0)
    assert len(queues) == 3 and "b" in queues and queues.level_of("b") == RequestClass.ROCKS
    clock.now = 4.0
    queues.begin_iteration()
    assert queues.stats() == [QueueStats(1, 4.0), QueueStats(0, 0.0), QueueStats(2, 2.5)]
    queues.remove("b")
    assert "b" not in queues and queues.stats()[RequestClass.ROCKS] == QueueStats(1, 2.0)
    with pytest.raises(ValueError, match="already queued"):
        queues.add("a", RequestClass.SAND, 5.0)
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        queues.add("z", 3, 5.0)


def _filled(entries: list[tuple[str, int, float]], policy: Policy = Policy.RPS) -> ClassQueues[str]:
    """Queues holding `entries`, each (name, level, arrival)."""
    queues, _ = _queues(policy)
    for name, level, arrival in entries:
        queues.add(name, level, arrival)
    return queues


def test_a_lead_goes_first_for_one_iteration_until_it_leaves() -> None:
    queues = _filled(
        [("sand-1", 0, 0.0), ("sand-2", 0, 1.0), ("rock", 2, 0.5), ("pebble", 1, 2.0)], Policy.HEADROOM
    )
    queues.begin_iteration()
    assert queues.best_heavier(RequestClass.SAND) == "pebble"  # class order among the heavier classes
    assert queues.best_heavier(RequestClass.ROCKS) is None
    queues.lead("pebble")
    assert (queues.peek(), queues.leading) == ("pebble", "pebble")
    assert queues.ordered() == ["pebble", "sand-1", "sand-2", "rock"]
    assert queues.pop() == "pebble" and queues.leading is None and queues.peek() == "sand-1"
    queues.lead("rock")
    queues.begin_iteration()  # a new step: no lead
    assert queues.peek() == "sand-1" and queues.leading is None


def test_heavier_than_lists_the_heavier_classes_each_in_arrival_order() -> None:
    queues = _filled([("rock-2", 2, 3.0), ("sand", 0, 0.0), ("pebble", 1, 2.0), ("rock-1", 2, 1.0)])
    assert queues.heavier_than(RequestClass.SAND) == [("pebble", 1), ("rock-1", 2), ("rock-2", 2)]
    assert queues.heavier_than(RequestClass.ROCKS) == []


def test_sand_goes_first_then_pebbles_then_rocks_when_fresh() -> None:
    queues, clock = _queues()
    queues.add("rock", RequestClass.ROCKS, 0.0)
    queues.add("pebble", RequestClass.PEBBLES, 0.1)
    queues.add("sand", RequestClass.SAND, 0.2)
    clock.now = 0.3
    queues.begin_iteration()
    assert [queues.pop() for _ in range(3)] == ["sand", "pebble", "rock"]
    with pytest.raises(IndexError):
        queues.peek()


def test_fcfs_ignores_classes() -> None:
    queues, _ = _queues(Policy.FCFS)
    for name, level, arrival in [("rock", 2, 0.0), ("pebble", 1, 0.1), ("sand", 0, 0.2)]:
        queues.add(name, level, arrival)
    assert queues.ordered() == ["rock", "pebble", "sand"]


def test_preempted_request_returns_to_the_head_of_its_class() -> None:
    queues, clock = _queues()
    queues.add("late", RequestClass.ROCKS, 5.0)
    queues.add("preempted", RequestClass.ROCKS, 1.0)
    clock.now = 6.0
    queues.begin_iteration()
    assert queues.ordered() == ["preempted", "late"]
    assert queues.stats()[RequestClass.ROCKS] == QueueStats(2, 3.0)


waiting_requests = st.lists(
    st.tuples(st.integers(0, 2), st.floats(0.0, 500.0, allow_nan=False)), min_size=1, max_size=60
)


@settings(max_examples=200, deadline=None)
@given(
    requests=waiting_requests,
    now=st.floats(0.0, 1000.0),
    policy=st.sampled_from(list(Policy)),
    boosts=st.lists(st.integers(1, 3), min_size=3, max_size=3),
)
def test_order_is_total_and_consistent_with_scores(
    requests: list[tuple[int, float]], now: float, policy: Policy, boosts: list[int]
) -> None:
    queues, _ = _queues(policy, now=now)
    names = [f"r{i}" for i in range(len(requests))]
    for name, (level, arrival) in zip(names, requests, strict=True):
        queues.add(name, level, arrival)
    queues.regulator._boost[:] = boosts
    order = queues.ordered()
    assert sorted(order) == sorted(names)  # every request exactly once

    index = {name: i for i, name in enumerate(names)}
    levels = [requests[index[n]][0] for n in order]
    arrivals = [requests[index[n]][1] for n in order]
    scores = queues.scores(levels, arrivals)
    keys = [(s, a, index[n]) for s, a, n in zip(scores, arrivals, order, strict=True)]
    assert keys == sorted(keys)  # ascending (score, arrival, insertion): a total order

    assert [queues.pop() for _ in names] == order  # popping heads walks the same order


@settings(max_examples=200, deadline=None)
@given(
    heavy_level=st.sampled_from([RequestClass.PEBBLES, RequestClass.ROCKS]),
    heavy_arrival=st.floats(0.0, 100.0),
    sand_arrivals=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40),
    pressure=st.lists(st.tuples(st.integers(0, 50), st.floats(0.0, 200.0)), max_size=20),
)
def test_waiting_pebble_or_rock_eventually_outranks_new_sand(
    heavy_level: int,
    heavy_arrival: float,
    sand_arrivals: list[float],
    pressure: list[tuple[int, float]],
) -> None:
    """However queue pressure evolved, once a heavy request has waited past the bound, sand arriving
    from then on queues behind it."""
    queues, clock = _queues(now=heavy_arrival)
    queues.add("heavy", heavy_level, heavy_arrival)
    for length, age in pressure:
        queues.regulator.observe([QueueStats(length, age)] * 3)
    bound = outrank_wait_s(PAPER_PARAMETERS[RequestClass(heavy_level)], PAPER_PARAMETERS[RequestClass.SAND])
    start = heavy_arrival + bound * (1 + 1e-9) + 1e-9
    for i, offset in enumerate(sorted(sand_arrivals)):
        clock.now = start + offset
        queues.add(f"sand{i}", RequestClass.SAND, clock.now)
        queues.begin_iteration()
        order = queues.ordered()
        assert order.index("heavy") < order.index(f"sand{i}")


@settings(max_examples=200, deadline=None)
@given(
    heavy_level=st.sampled_from([RequestClass.PEBBLES, RequestClass.ROCKS]),
    lighter_wait_s=st.floats(0.0, 2.0),
    lighter=st.lists(st.tuples(st.integers(0, 1), st.floats(0.0, 1.0)), min_size=1, max_size=30),
    pressure=st.lists(
        st.lists(st.tuples(st.integers(0, 50), st.floats(0.0, 200.0)), min_size=3, max_size=3), max_size=20
    ),
)
def test_a_heavy_request_past_the_starvation_bound_outranks_every_lighter_one(
    heavy_level: int,
    lighter_wait_s: float,
    lighter: list[tuple[int, float]],
    pressure: list[list[tuple[int, float]]],
) -> None:
    """Lighter requests that have waited up to D, under any queue-pressure history (each class its
    own), rank behind a heavy request that has waited `starvation_bound_s(D)`."""
    queues, clock = _queues()
    ladder = queues.regulator.ladder
    bound = starvation_bound_s(ladder, heavy_level, lighter_wait_s, PressureSettings().max_boost)
    assume(math.isfinite(bound))
    clock.now = 1000.0 + bound
    queues.add("heavy", heavy_level, 1000.0 * (1 - 1e-12))
    for i, (level, fraction) in enumerate(lighter):
        queues.add(f"light{i}", min(level, heavy_level - 1), clock.now - fraction * lighter_wait_s)
    for stats in pressure:
        queues.regulator.observe([QueueStats(length, age) for length, age in stats])
    queues.now = clock.now
    assert queues.ordered()[0] == "heavy"


def test_the_starvation_bound_is_tight_against_sand_at_maximal_boost() -> None:
    """Sand that has waited 1 s at boost 3 still outranks a rock just short of the bound."""
    queues, clock = _queues()
    bound = starvation_bound_s(queues.regulator.ladder, RequestClass.ROCKS, 1.0, 3.0)
    queues.add("sand", RequestClass.SAND, 1000.0 - 1.0)
    queues.add("rock", RequestClass.ROCKS, 1000.0 - 0.99 * bound)
    # Sand's queue far older and longer than its average: boost 3; the rocks' unchanged: boost 1.
    queues.regulator.observe([QueueStats(1, 0.0), QueueStats(0, 0.0), QueueStats(1, 0.99 * bound)])
    queues.regulator.observe([QueueStats(50, 100.0), QueueStats(0, 0.0), QueueStats(1, 0.99 * bound)])
    assert queues.regulator.boosts() == [3, 1, 1]
    queues.now = clock.now = 1000.0
    assert queues.ordered() == ["sand", "rock"]


def test_a_rock_that_aged_past_fresh_sand_holds_the_head_until_it_leaves() -> None:
    """Sand queued behind a rock that waits for blocks may age past it; under rps it stays behind."""
    queues, clock = _queues()
    bound = outrank_wait_s(PAPER_PARAMETERS[RequestClass.ROCKS], PAPER_PARAMETERS[RequestClass.SAND])
    queues.add("rock", RequestClass.ROCKS, 0.0)
    clock.now = 1.01 * bound
    queues.begin_iteration()
    assert queues.peek() == "rock"
    queues.add("sand", RequestClass.SAND, clock.now)
    clock.now += 3.0  # sand aged 3 s outranks the rock by score
    queues.begin_iteration()
    assert queues.score(RequestClass.SAND, clock.now - 3.0) < queues.score(RequestClass.ROCKS, 0.0)
    assert queues.ordered() == ["rock", "sand"] and queues.peek() == "rock"
    # An older rock re-queued (preempted) ranks ahead by score, but the held rock leaves first.
    queues.add("older-rock", RequestClass.ROCKS, -1.0)
    assert queues.pop() == "rock"
    assert queues.ordered() == ["sand", "older-rock"]


def test_static_priorities_hold_no_head() -> None:
    queues, clock = _queues(Policy.STATIC)
    queues.add("rock", RequestClass.ROCKS, 0.0)
    clock.now = 1000.0
    queues.begin_iteration()
    assert queues.peek() == "rock"
    queues.add("sand", RequestClass.SAND, clock.now)
    assert queues.peek() == "sand"


def test_heavy_request_does_not_outrank_fresh_sand_before_the_bound() -> None:
    """The bound is tight at boost 1: a little earlier, fresh sand still goes first."""
    for level in (RequestClass.PEBBLES, RequestClass.ROCKS):
        queues, clock = _queues()
        queues.add("heavy", level, 0.0)
        clock.now = 0.99 * outrank_wait_s(PAPER_PARAMETERS[level], PAPER_PARAMETERS[RequestClass.SAND])
        queues.add("sand", RequestClass.SAND, clock.now)
        queues.begin_iteration()
        assert queues.ordered() == ["sand", "heavy"]


def test_a_parked_group_sits_out_while_skipped_and_returns_to_its_place() -> None:
    queues, clock = _queues()
    for name, level, arrival in [
        ("rock-1", 2, 0.0),
        ("sand", 0, 1.0),
        ("rock-2", 2, 2.0),
        ("rock-3", 2, 3.0),
    ]:
        queues.add(name, level, arrival)
    clock.now = 4.0
    queues.begin_iteration()
    queues.add("rock-0", RequestClass.ROCKS, -1.0)
    plain = queues.ordered()
    queues.remove("rock-0")
    queues.park(["rock-1", "rock-3"], "held")
    assert queues.skip_groups(lambda group: group == "held") == 2
    assert len(queues) == 2 and queues.ordered() == [r for r in plain if r in {"sand", "rock-2"}]
    assert queues.stats()[RequestClass.ROCKS] == QueueStats(3, 4.0 - 5.0 / 3)  # still waiting, for the boosts
    queues.add("rock-0", RequestClass.ROCKS, -1.0, group="held")  # re-queued into its group
    assert "rock-0" not in queues.ordered() and len(queues) == 2
    queues.unskip()
    assert len(queues) == 5 and queues.ordered() == plain  # a group not skipped is in the order
    queues.unpark("held")
    assert queues.ordered() == plain and queues.heavier_than(RequestClass.SAND)[0] == ("rock-0", 2)
    assert [queues.pop() for _ in plain] == plain


@settings(max_examples=200, deadline=None)
@given(
    requests=waiting_requests,
    groups=st.lists(st.sampled_from([None, "a", "b"]), min_size=60, max_size=60),
    skipped=st.sets(st.sampled_from(["a", "b"])),
    unparked=st.sets(st.sampled_from(["a", "b"])),
    now=st.floats(0.0, 1000.0),
)
def test_parking_leaves_the_order_of_the_rest_unchanged(
    requests: list[tuple[int, float]],
    groups: list[str | None],
    skipped: set[str],
    unparked: set[str],
    now: float,
) -> None:
    """With groups parked and some skipped, the order is the plain order without the skipped ones;
    after unparking, the plain order, and the same ties."""
    parked, _ = _queues(now=now)
    plain, _ = _queues(now=now)
    names = [f"r{i}" for i in range(len(requests))]
    for name, (level, arrival) in zip(names, requests, strict=True):
        parked.add(name, level, arrival)
        plain.add(name, level, arrival)
    for group in ("a", "b"):
        parked.park([n for n, g in zip(names, groups, strict=False) if g == group], group)
    hidden = {n for n, g in zip(names, groups, strict=False) if g in skipped}
    parked.skip_groups(lambda group: group in skipped)
    assert parked.ordered() == [n for n in plain.ordered() if n not in hidden]
    assert [parked.pop() for _ in range(len(parked))] == [n for n in plain.ordered() if n not in hidden]
    parked.unskip()
    for group in unparked:
        parked.unpark(group)
    rest = [n for n in plain.ordered() if n in hidden]
    assert parked.ordered() == rest and [parked.pop() for _ in rest] == rest
