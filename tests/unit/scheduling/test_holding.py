"""Decode hold: held until the lighter requests running at its start finish, or for at most max_hold_s."""

from __future__ import annotations

from rps_serve.scheduling.holding import DecodeHolds, Hold

MAX_HOLD_S = 0.5


def test_a_rock_is_held_until_the_sand_running_at_its_start_finishes() -> None:
    hold = Hold.begin(2, {"sand-1": 0, "sand-2": 0, "rock-0": 2}, now=10.0)
    assert hold.waiting_for == {"sand-1", "sand-2"}
    assert hold.keeps({"sand-1", "sand-2", "rock-0"}, 10.1, MAX_HOLD_S)
    # sand that arrives during the hold does not extend it
    assert hold.keeps({"sand-2", "sand-3"}, 10.2, MAX_HOLD_S)
    assert not hold.keeps({"sand-3", "rock-0"}, 10.3, MAX_HOLD_S)


def test_the_hold_ends_after_max_hold_s_and_never_comes_back() -> None:
    hold = Hold.begin(1, {"sand": 0}, now=0.0)
    assert hold.keeps({"sand"}, MAX_HOLD_S - 0.01, MAX_HOLD_S)
    assert not hold.keeps({"sand"}, MAX_HOLD_S, MAX_HOLD_S)
    assert not hold.keeps({"sand"}, MAX_HOLD_S + 0.01, MAX_HOLD_S)


def test_nobody_lighter_running_means_no_hold() -> None:
    assert not Hold.begin(0, {"rock": 2, "sand": 0}, now=0.0).keeps({"rock", "sand"}, 0.0, MAX_HOLD_S)
    assert not Hold.begin(1, {"pebble": 1}, now=0.0).keeps({"pebble"}, 0.0, MAX_HOLD_S)
    assert not Hold.begin(2, {}, now=0.0).keeps(set(), 0.0, MAX_HOLD_S)


class _Request:
    """A waiting request, weakly referable as vLLM's are."""


def test_decode_holds_decide_once_per_request_and_hold_a_cohort_together() -> None:
    holds: DecodeHolds[_Request] = DecodeHolds(MAX_HOLD_S, 3)
    rock, pebble, text = _Request(), _Request(), _Request()
    waiting = {rock, pebble, text}
    assert holds.arrived(rock, 2, exempt=False) is None
    assert holds.arrived(pebble, 1, exempt=False) is None
    assert holds.arrived(text, 2, exempt=True) is None
    begun, ended = holds.step({"sand": 0}, 0.0, waiting.__contains__)
    assert sorted(len(members) for _, members in begun) == [1, 1] and not ended
    group_of = {members[0]: group for group, members in begun}
    rock_group, pebble_group = group_of[rock], group_of[pebble]
    assert holds.in_force(rock_group) and holds.in_force(pebble_group)
    assert holds.arrived(rock, 2, exempt=False) == rock_group  # re-queued (preempted): back in its group
    # only a pebble running: the rock's sand has finished; the pebbles' hold is not checked this step
    assert holds.step({"other": 1}, 0.1, waiting.__contains__) == ([], [rock_group])
    assert not holds.in_force(rock_group) and not holds.in_force(pebble_group)
    assert holds.arrived(rock, 2, exempt=False) is None  # released for good
    holds.step({"sand": 0, "other": 1}, 0.2, waiting.__contains__)
    assert holds.in_force(pebble_group)  # its sand runs again: held, for at most MAX_HOLD_S
    assert holds.step({"sand": 0}, MAX_HOLD_S, waiting.__contains__) == ([], [pebble_group])
