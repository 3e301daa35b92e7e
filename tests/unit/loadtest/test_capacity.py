"""The open-loop capacity: a backlog's growth read off a run's records, and the bisection on it,
against a single-server FCFS queue whose capacity is known."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.client import Tally
from rps_harness.loadtest.capacity import backlog_growth, peak_in_system, search_open_loop_capacity
from rps_harness.loadtest.replay import Replayed
from rps_harness.metrics import RequestRecords

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


def _verdicts(bounded_from: float):
    """Probes that read every rate from `bounded_from` down as bounded and every rate above as growing,
    with the records of a queue that never grows or one that gains a request every second."""

    def probe(rate: float) -> Replayed:
        n = 100
        arrivals = np.linspace(0.0, n / rate, n)
        finish = arrivals + (0.1 if rate <= bounded_from else 1.0 + arrivals)
        records = RequestRecords(arrivals, finish, finish, np.ones(n), np.zeros(n, int), np.zeros(n, int))
        return Replayed(records, Tally(n, n, 0, 0, 0), [])

    return probe


def test_three_probes_down_from_a_ceiling_above_capacity_end_on_a_bounded_rate() -> None:
    # The recorded case: a closed-loop ceiling of 3.40/s whose probe grew, and a second probe, halfway
    # to the low end, that grew too. Bisecting again probed a rate that grew once more and sized the
    # loads from the low end no probe had run at; the last probe runs there instead and brackets.
    ceiling, low = 3.4, 0.5 * 3.4
    found = search_open_loop_capacity(_verdicts(bounded_from=low), ceiling=ceiling, probes=3)
    rates = [p.rate for p in found.probes]
    assert rates == [ceiling, (ceiling + low) / 2, low]
    assert [p.bounded for p in found.probes] == [False, False, True]
    assert found.bracketed and found.rate == low
    assert found.describe().startswith(f"{low:.2f} req/s open loop, below {(ceiling + low) / 2:.2f}")


def test_the_last_probe_at_the_low_end_that_grows_too_brackets_nothing() -> None:
    found = search_open_loop_capacity(_verdicts(bounded_from=0.0), ceiling=4.0, probes=2)
    assert [p.rate for p in found.probes] == [4.0, 2.0]
    assert not any(p.bounded for p in found.probes) and not found.bracketed
    assert found.rate == 2.0  # sized from the lowest probe, which the description says grew
    assert found.describe().startswith("below 2.00 req/s open loop, loads sized from 2.00")


def test_the_low_end_is_probed_only_by_the_last_probe() -> None:
    # With probes to spare the search still bisects, and a bounded midpoint keeps it bisecting.
    found = search_open_loop_capacity(_verdicts(bounded_from=3.0), ceiling=4.0, probes=4)
    assert [p.rate for p in found.probes] == [4.0, 3.0, 3.5, 3.25]
    assert found.bracketed and found.rate == 3.0


def test_the_peak_counts_requests_arrived_and_not_finished() -> None:
    arrivals = np.array([0.0, 1.0, 2.0, 3.0])
    finish = np.array([2.0, 2.5, np.nan, 3.5])  # the third never finished; a finish at 2.0 leaves first
    records = RequestRecords(arrivals, finish, finish, np.ones(4), np.zeros(4, int), np.zeros(4, int))
    assert peak_in_system(records) == 2


def test_a_probe_that_came_near_the_admission_limit_is_not_bounded() -> None:
    """The same stable queue, searched with a limit on the requests in the system: the rates whose
    probes held more than it count as unbounded, so the capacity comes out lower."""
    free = search_open_loop_capacity(_probe([]), ceiling=3.0, probes=5)
    peaks = {p.rate: p.peak_in_system for p in free.probes}
    limit = min(peaks[r] for r in peaks if r <= free.rate) - 1
    limited = search_open_loop_capacity(_probe([]), ceiling=3.0, probes=5, max_in_system=limit)
    assert limited.rate < free.rate
    assert all(p.bounded == (p.peak_in_system <= limit and p.rate <= free.rate) for p in limited.probes)
