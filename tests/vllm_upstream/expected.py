"""The upstream tests expected to fail here, one reason each; the plug-in marks them xfail(strict=True).

Three kinds, kept apart so that none hides behind another:
- `BY_DESIGN` (RPS only): the test pins an order RPS changes on purpose. RPS replaces the waiting queue
  with class queues (`ClassRequestQueue`: by class, then arrival time) and sets `request.priority` to the
  class level, so the caller's `priority`, and FCFS order by submission, are not what decides.
- `INCOMPATIBLE` (RPS only): a real incompatibility of the RPS classes with vLLM's scheduler contract
  (a crash or a bookkeeping mismatch, not an ordering choice): each one is a bug to fix or a limitation
  to document, listed so that the run stays readable while it is open.
- `OFFLINE` (both schedulers): fails with vLLM's stock scheduler too, from this CPU-only, offline
  set-up (no GPU, no hub, no optional packages), not from RPS.

Keys are node ids relative to vLLM's source tree without parameters (`tests/v1/core/f.py::test_x`),
or with them (`...::test_x[a-b]`) to single out one parametrization.

Per vLLM release: the three tables hold what fails on every release in `BY_VERSION`, and
`BY_VERSION[release]` adds what fails on that one only (under the same three kinds), so that an entry
for one release never marks a test that passes on another (xfail is strict: that would be an XPASS
failure). A release missing from `BY_VERSION` has not been checked: the plug-in refuses to guess and
asks for `--rps-no-xfail` (then add its entries here). A test a release does not have matches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    BY_DESIGN = "RPS by design"
    INCOMPATIBLE = "RPS incompatibility"
    OFFLINE = "offline/CPU set-up"


@dataclass(frozen=True)
class Expectation:
    kind: Kind
    reason: str
    run: bool = True  # False: do not even run it (it would hang or take the machine)

    def describe(self) -> str:
        return f"{self.kind.value}: {self.reason}"


_CORE = "tests/v1/core/"

_SAME_CLASS = "the requests share a class, so arrival order decides, not the caller's priority"

BY_DESIGN: dict[str, str] = {
    "test_scheduler.py::test_priority_scheduling_basic_ordering": (
        f"expects caller-priority order [1, 2, 0]; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_mixed_priority_and_arrival": (
        f"expects caller-priority order over arrival; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_preemption": (
        f"expects a high-priority arrival to preempt a low-priority running request; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_preemption_victim_selection": (
        f"expects the highest caller priority to be scheduled first; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_waiting_queue_order": (
        f"expects the waiting queue in caller-priority order; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_with_limited_slots": (
        f"expects the priority-0 requests to take the limited slots; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_heap_property": (
        "expects requests in caller-priority order and reads request.priority back: RPS overwrites it "
        "with the class level (0 for text)"
    ),
    "test_scheduler.py::test_priority_scheduling_preemption_and_resumption_when_out_of_kv": (
        f"expects the high-priority request to keep running under KV pressure; {_SAME_CLASS}"
    ),
    "test_scheduler.py::test_priority_scheduling_ec_connector_preemption_and_resumption": (
        f"expects the high-priority image request to keep running under KV pressure; {_SAME_CLASS}"
    ),
    "test_deferred_block_free.py::test_allocation_retry_waits_for_fence_then_succeeds[fcfs-1]": (
        "expects FCFS's victim (the last running request); RPS always runs vLLM's preemption with the "
        "PRIORITY policy, whose victim is the worst (priority, arrival): the request the test set to 9"
    ),
    "test_worker_slot_overflow.py::test_reset_prefix_cache_priority_does_not_over_admit_worker_slot": (
        "expects the higher-priority newcomer B admitted ahead of the preempted A (the preemption report "
        f"it checks first passes); {_SAME_CLASS}"
    ),
}

INCOMPATIBLE: dict[str, str] = {}

# Empty on vLLM 0.32.0 and 0.33.0: every selected test passes with the stock schedulers on this set-up.
OFFLINE: dict[str, str] = {}

# The releases checked (each with the tables above, strict), and what fails on one of them only.
# Empty for both: 0.32.0's default files (286 tests, stock: all pass) fail on RPS exactly where
# 0.33.0's do (the 20 node ids above); the 35 test functions 0.33.0 added pass on RPS.
BY_VERSION: dict[str, dict[Kind, dict[str, str]]] = {
    "0.32.0": {},
    "0.33.0": {},
}


class UnknownVersionError(LookupError):
    """The expected failures of this vLLM release have not been checked (it is not in `BY_VERSION`)."""


def _expectations(kind: Kind, table: dict[str, str]) -> dict[str, Expectation]:
    return {_CORE + key: Expectation(kind, reason) for key, reason in table.items()}


def expectations_for(rps: bool, version: str) -> dict[str, Expectation]:
    """Expected failures on vLLM `version` for a run against RPS's classes (`rps`) or vLLM's stock ones.

    Raises `UnknownVersionError` for a release not in `BY_VERSION`: marking its tests with another
    release's list could hide a new failure behind an old reason, or turn a fix into an XPASS."""
    if version not in BY_VERSION:
        known = ", ".join(sorted(BY_VERSION))
        raise UnknownVersionError(f"no expected-failure list for vLLM {version} (known: {known})")
    specific = BY_VERSION[version]
    kinds = [Kind.OFFLINE] + ([Kind.BY_DESIGN, Kind.INCOMPATIBLE] if rps else [])
    common = {Kind.BY_DESIGN: BY_DESIGN, Kind.INCOMPATIBLE: INCOMPATIBLE, Kind.OFFLINE: OFFLINE}
    expected: dict[str, Expectation] = {}
    for kind in kinds:
        expected |= _expectations(kind, common[kind])
        expected |= _expectations(kind, specific.get(kind, {}))
    return expected
