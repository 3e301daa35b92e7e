"""The open-loop capacity: a backlog's growth read off a run's records, and the bisection on it,
against a single-server FCFS queue whose capacity is known."""

from __future__ import annotations

import numpy as np
import pytest

from rps_serve.client import Tally
from rps_serve.loadtest.capacity import backlog_growth, search_open_loop_capacity
from rps_serve.loadtest.replay import Replayed
from rps_serve.metrics import RequestRecords

SERVICE_S = 0.25  # the queue serves 4 requests per second


def _fcfs_queue(rate: float, requests: int = 400, seed: int = 0) -> RequestRecords:
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, requests))
    finish = np.empty(requests)
    free = 0.0
    for i, arrival in enumerate(arrivals):
        free = max(free, arrival) + SERVICE_S
        finish[i] = free
    n = requests
    return RequestRecords(arrivals, finish, finish, np.ones(n), np.zeros(n, int), np.zeros(n, int))


def test_a_stable_queue_does_not_grow_and_an_overloaded_one_grows_by_the_excess() -> None:
    assert abs(backlog_growth(_fcfs_queue(2.0))) < 0.1 * 2.0
    # At 6/s against 4/s served, the system gains about 2 requests a second.
    assert backlog_growth(_fcfs_queue(6.0, requests=4000)) == pytest.approx(6.0 - 1 / SERVICE_S, rel=0.1)


def _probe(rates: list[float]):
    def probe(rate: float) -> Replayed:
        rates.append(rate)
        records = _fcfs_queue(rate, requests=int(rate * 200))
        return Replayed(records, Tally(len(records.ttft), len(records.ttft), 0, 0, 0), [])

    return probe


@pytest.mark.parametrize("ceiling", [6.0, 3.0])
def test_the_search_brackets_the_known_capacity(ceiling: float) -> None:
    # A first guess above the capacity (6/s) or below it (3/s): either way a probe above is unbounded.
    rates: list[float] = []
    found = search_open_loop_capacity(_probe(rates), ceiling=ceiling, probes=5)
    assert rates == [p.rate for p in found.probes] and len(rates) == 5
    assert rates[0] == ceiling
    assert found.bracketed
    assert 0.8 * (1 / SERVICE_S) <= found.rate <= 1.1 * (1 / SERVICE_S)
    assert all(p.bounded == (p.rate <= found.rate) for p in found.probes)
    assert found.describe().startswith(f"{found.rate:.2f} req/s open loop, below ")


def test_a_search_that_never_saw_the_backlog_grow_gives_a_lower_bound() -> None:
    rates: list[float] = []
    found = search_open_loop_capacity(_probe(rates), ceiling=1.0, probes=2)
    assert rates == [1.0, 1.25]  # every probe bounded: each one STEP_UP higher
    assert not found.bracketed and found.rate == 1.25
    assert found.describe().startswith("at least 1.25 req/s open loop")
    nothing_bounded = search_open_loop_capacity(_probe([]), ceiling=12.0, probes=1)
    assert not nothing_bounded.bracketed and nothing_bounded.rate == 6.0  # the unprobed low end
    assert nothing_bounded.describe().startswith("below 12.00 req/s open loop, loads sized from 6.00")
