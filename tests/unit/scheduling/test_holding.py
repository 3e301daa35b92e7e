"""Decode hold: held until the lighter requests running at its start finish, or for at most max_hold_s."""

from __future__ import annotations

from rps_serve.scheduling.holding import Hold

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
