"""The Priority Regulator against values computed by hand from the paper's formula (arXiv 2603.26498)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rps_serve.requests import RequestClass
from rps_serve.scheduling.parameters import (
    PAPER_PARAMETERS,
    Policy,
    PressureSettings,
    class_ladder,
    in_time_units,
)
from rps_serve.scheduling.regulator import (
    PriorityRegulator,
    QueuePressure,
    QueueStats,
    boost_from_excess,
    outrank_wait_s,
    starvation_bound_s,
)

SAND, PEBBLES, ROCKS = RequestClass.SAND, RequestClass.PEBBLES, RequestClass.ROCKS


def _one(regulator: PriorityRegulator, level: int, waiting_s: float, method: str = "scores") -> float:
    now = 1000.0
    values = getattr(regulator, method)(np.array([level]), np.array([now - waiting_s]), now)
    return float(values[0])


# Hand computations, boost 1:
#   sand, w = 2 s:     2^3.5 = 11.3137; 0.05 * 11.3137 = 0.565685; exp(-0.565685) = 0.567971
#                      priority = 0.1 + 1 - 0.567971 = 0.532029; score = -ln(0.532029) = 0.631057
#   pebbles, w = 10 s: 10^2.5 = 316.228; 0.003 * 316.228 = 0.948683; exp(-0.948683) = 0.387251
#                      priority = 0.05 + 0.612749 = 0.662749
#   rocks, w = 100 s:  100^1.1 = 158.489; 0.00075 * 158.489 = 0.118867; exp(-0.118867) = 0.887926
#                      priority = 0 + 0.112074
@pytest.mark.parametrize(
    ("level", "waiting_s", "expected"),
    [(SAND, 2.0, 0.532029), (PEBBLES, 10.0, 0.662749), (ROCKS, 100.0, 0.112074), (SAND, 0.0, 0.1)],
)
def test_rps_priority_matches_hand_computation(level: int, waiting_s: float, expected: float) -> None:
    regulator = PriorityRegulator(Policy.RPS, class_ladder(3))
    assert _one(regulator, level, waiting_s, "priorities") == pytest.approx(expected, abs=1e-6)


def test_score_is_minus_log_priority() -> None:
    regulator = PriorityRegulator(Policy.RPS, class_ladder(3))
    assert _one(regulator, SAND, 2.0) == pytest.approx(0.631057, abs=1e-6)
    assert _one(regulator, ROCKS, 0.0) == math.inf


def test_boost_multiplies_the_aging_rate() -> None:
    # Rocks, w = 100 s, boost 3: 3 * 0.118867 = 0.356601; 1 - exp(-0.356601) = 1 - 0.700052 = 0.299948.
    regulator = PriorityRegulator(Policy.RPS, class_ladder(3))
    regulator._boost[ROCKS] = 3
    assert _one(regulator, ROCKS, 100.0, "priorities") == pytest.approx(0.299948, abs=1e-6)


def test_static_aging_edf_and_fcfs_scores() -> None:
    ladder = class_ladder(3)
    assert _one(PriorityRegulator(Policy.STATIC, ladder), PEBBLES, 50.0) == pytest.approx(-math.log(0.05))
    # Aging only, sand at 2 s: 1 - 0.567971 = 0.432029.
    assert _one(PriorityRegulator(Policy.AGING, ladder), SAND, 2.0, "priorities") == pytest.approx(
        0.432029, abs=1e-6
    )
    # EDF: deadline = arrival (1000 - 3) + rocks SLO.
    edf = _one(PriorityRegulator(Policy.EDF, ladder), ROCKS, 3.0)
    assert edf == pytest.approx(997.0 + PAPER_PARAMETERS[ROCKS].slo_s)
    assert _one(PriorityRegulator(Policy.FCFS, ladder), ROCKS, 3.0) == 997.0


# excess = max(0, 0.7 (age/ema_age - 1) + 0.3 (len/ema_len - 1)); boost = round(1 + 2 (1 - exp(-2 excess)))
#   excess 0      -> 1 + 0       = 1
#   excess 0.2    -> 1 + 2*0.3297 = 1.659 -> 2
#   excess 1.0    -> 1 + 2*0.8647 = 2.729 -> 3
@pytest.mark.parametrize(("excess", "boost"), [(0.0, 1), (0.2, 2), (1.0, 3), (50.0, 3)])
def test_boost_from_excess(excess: float, boost: int) -> None:
    assert boost_from_excess(excess, PressureSettings()) == boost


def test_pressure_rises_when_queue_outgrows_its_history() -> None:
    pressure = QueuePressure(PressureSettings(), [None])
    for _ in range(500):
        assert pressure.observe([QueueStats(length=4, mean_age_s=1.0)])[0] == 1
    # Age doubles and length doubles: excess = 0.7 * 1 + 0.3 * 1 = 1.0 -> boost 3.
    assert pressure.observe([QueueStats(length=8, mean_age_s=2.0)])[0] == 3
    # A shorter, younger queue than usual is no pressure.
    assert pressure.observe([QueueStats(length=1, mean_age_s=0.1)])[0] == 1


def test_first_arrival_after_idle_is_not_maximal_pressure() -> None:
    pressure = QueuePressure(PressureSettings(), [None])
    for _ in range(100):
        pressure.observe([QueueStats(0, 0.0)])
    # Against the floors (1 request, 0.1 s): 0.7 * (0.01 / 0.1 - 1) + 0.3 * (1 / 1 - 1) < 0 -> boost 1.
    assert pressure.observe([QueueStats(1, 0.01)])[0] == 1


def test_outrank_wait_matches_hand_computation() -> None:
    # Rocks vs fresh sand: (-ln(0.9) / 0.00075) ** (1 / 1.1) = 140.48 ** 0.90909 = 89.61 s.
    assert outrank_wait_s(PAPER_PARAMETERS[ROCKS], PAPER_PARAMETERS[SAND]) == pytest.approx(89.6146, abs=1e-3)
    # Pebbles vs fresh sand: (-ln(0.95) / 0.003) ** 0.4 = 17.098 ** 0.4 = 3.113 s.
    assert outrank_wait_s(PAPER_PARAMETERS[PEBBLES], PAPER_PARAMETERS[SAND]) == pytest.approx(
        3.1130, abs=1e-3
    )
    assert outrank_wait_s(PAPER_PARAMETERS[SAND], PAPER_PARAMETERS[ROCKS]) == 0.0


def test_starvation_bound_matches_hand_computation() -> None:
    ladder = class_ladder(3)
    # Fresh lighter requests: the outrank waits above; the rock's bound is set by sand, not pebbles.
    assert starvation_bound_s(ladder, ROCKS, 0.0, 3.0) == pytest.approx(89.6146, abs=1e-3)
    assert starvation_bound_s(ladder, SAND, 5.0, 3.0) == 0.0
    # Sand that has waited 1 s at boost 3: A = 1 - exp(-0.15) = 0.13929; the rock needs priority
    # 0.23929: (-ln(0.76071) / 0.00075) ** (1 / 1.1) = 364.73 ** 0.90909 = 213.3 s.
    assert starvation_bound_s(ladder, ROCKS, 1.0, 3.0) == pytest.approx(213.31, abs=0.01)
    # Sand that has waited 2.2 s at boost 3 has aged past 0.9: no rock can catch it up.
    assert starvation_bound_s(ladder, ROCKS, 2.2, 3.0) == math.inf


@pytest.mark.parametrize("num_levels", [2, 3, 4, 5])
def test_ladder_goes_from_sand_to_rocks(num_levels: int) -> None:
    ladder = class_ladder(num_levels)
    assert ladder[0] == PAPER_PARAMETERS[SAND] and ladder[-1] == PAPER_PARAMETERS[ROCKS]
    statics = [c.static_priority for c in ladder]
    rates = [c.k for c in ladder]
    assert statics == sorted(statics, reverse=True) and rates == sorted(rates, reverse=True)


def test_three_levels_are_the_paper_parameters() -> None:
    assert class_ladder(3) == tuple(PAPER_PARAMETERS[c] for c in RequestClass)


def test_policy_parse_names_the_choices() -> None:
    assert Policy.parse(" RPS ") is Policy.RPS
    with pytest.raises(ValueError, match="rps, static, aging, edf, fcfs"):
        Policy.parse("lifo")


def test_an_empty_queue_leaves_its_history_alone() -> None:
    busy, idle_between = QueuePressure(PressureSettings(), [None]), QueuePressure(PressureSettings(), [None])
    for _ in range(500):
        busy.observe([QueueStats(length=4, mean_age_s=2.0)])
        idle_between.observe([QueueStats(length=4, mean_age_s=2.0)])
        assert idle_between.observe([QueueStats(0, 0.0)])[0] == 1  # an empty queue is under no pressure
    # Steps without requests did not pull the EMAs towards 0: the same queue reads the same.
    probe = QueueStats(length=6, mean_age_s=3.0)
    assert idle_between.observe([probe])[0] == busy.observe([probe])[0] == 2


def test_a_fresh_rock_is_not_under_pressure_before_its_class_slo() -> None:
    rocks = class_ladder(3)[ROCKS]
    pressure = QueuePressure(PressureSettings(), [rocks.slo_s])
    for _ in range(200):
        pressure.observe([QueueStats(0, 0.0)])
    ages = np.arange(0.0, rocks.slo_s, 0.01)
    assert all(pressure.observe([QueueStats(1, float(age))])[0] == 1 for age in ages)
    # Long past its SLO, the same queue is.
    assert pressure.observe([QueueStats(1, 3 * rocks.slo_s)])[0] > 1


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_priorities_on_a_slower_clock_age_that_much_later(scale: float) -> None:
    ladder = class_ladder(3)
    slow = in_time_units(ladder, scale)
    assert in_time_units(ladder, 1.0) == ladder
    # Every wait that makes one class outrank another takes `scale` times as long.
    for heavy in (PEBBLES, ROCKS):
        assert outrank_wait_s(slow[heavy], slow[SAND]) == pytest.approx(
            scale * outrank_wait_s(ladder[heavy], ladder[SAND])
        )
    # Priorities after w seconds on the slow clock are those after w / scale on the paper's.
    paper, slowed = PriorityRegulator(Policy.RPS, ladder), PriorityRegulator(Policy.RPS, slow)
    for level in range(3):
        assert _one(slowed, level, 4.0 * scale, "priorities") == pytest.approx(
            _one(paper, level, 4.0, "priorities")
        )
    with pytest.raises(ValueError, match="positive"):
        in_time_units(ladder, 0.0)


@settings(max_examples=300, deadline=None)
@given(
    policy=st.sampled_from([p for p in Policy if p is not Policy.MODALITY_PRIORITY]),
    requests=st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 1000.0)), min_size=1, max_size=20),
    now=st.floats(0.0, 1000.0),
    boosts=st.lists(st.integers(1, 3), min_size=3, max_size=3),
)
def test_one_request_scores_as_the_batch_does(
    policy: Policy, requests: list[tuple[int, float]], now: float, boosts: list[int]
) -> None:
    # A step scores queue heads one at a time, the simulator in arrays: the same formula, the same values.
    regulator = PriorityRegulator(policy, class_ladder(3))
    regulator.observe([QueueStats(0, 0.0)] * 3)
    regulator._boost[:] = [float(b) for b in boosts]
    levels, arrivals = np.array([r[0] for r in requests]), np.array([r[1] for r in requests])
    batch = regulator.scores(levels, arrivals, now)
    one = [regulator.score(level, arrival, now) for level, arrival in requests]
    assert one == pytest.approx(batch.tolist(), rel=1e-12, abs=1e-12)
