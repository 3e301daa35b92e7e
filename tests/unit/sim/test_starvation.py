"""The starvation bound in the simulator: steady sand below capacity, one rock that needs a drained cache."""

from __future__ import annotations

import math

import pytest

from rps_harness.sim.starvation import SustainedSand, run_sustained_sand
from rps_serve.scheduling.parameters import Policy

# Whole simulated runs: seconds a test (`make test-fast` leaves them out).
pytestmark = pytest.mark.slow

SCENARIO = SustainedSand()


def test_rps_serves_the_rock_within_the_derived_bound_while_sand_flows() -> None:
    outcome = run_sustained_sand(Policy.RPS, SCENARIO)
    assert math.isfinite(outcome.bound_s)
    assert outcome.rock_ttft_s <= outcome.bound_s
    assert SCENARIO.rock_arrival_s + outcome.rock_ttft_s < SCENARIO.sand_until_s


def test_without_aging_the_rock_waits_until_the_sand_stops() -> None:
    """Static class priorities: every block that frees goes to new sand, past any bound."""
    outcome = run_sustained_sand(Policy.STATIC, SCENARIO)
    assert SCENARIO.rock_arrival_s + outcome.rock_ttft_s >= SCENARIO.sand_until_s
    assert outcome.rock_ttft_s > outcome.bound_s
