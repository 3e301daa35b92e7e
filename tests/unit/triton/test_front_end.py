"""The front end's order: by (class level, arrival) under class-aware policies, by arrival otherwise;
a request withdrawn before a worker takes it is never worked on."""

from __future__ import annotations

import threading

import pytest

from rps_serve.triton.front_end import FrontEnd


def _run(class_ordered: bool, levels: list[int], withdraw: frozenset[int] = frozenset()) -> list[int]:
    """Indices of `levels` in the order one worker took them, the first holding the worker while the
    rest queue."""
    front_end = FrontEnd(workers=1, class_ordered=class_ordered)
    hold, done = threading.Event(), threading.Event()
    order: list[int] = []
    front_end.submit(0, hold.wait)
    tickets = []
    for index, level in enumerate(levels):
        tickets.append(front_end.submit(level, lambda index=index: order.append(index)))
    for index in withdraw:
        assert tickets[index].withdraw()
    front_end.submit(99, done.set)
    hold.set()
    assert done.wait(10)
    front_end.close()
    return order


def test_lighter_classes_go_first_and_arrival_breaks_ties() -> None:
    assert _run(True, [2, 1, 0, 2, 0]) == [2, 4, 1, 0, 3]


def test_without_class_order_arrival_decides() -> None:
    assert _run(False, [2, 1, 0, 2, 0]) == [0, 1, 2, 3, 4]


def test_withdrawn_work_never_runs_and_taken_work_cannot_be_withdrawn() -> None:
    assert _run(True, [1, 0, 2], withdraw=frozenset({1})) == [0, 2]
    front_end = FrontEnd(workers=1, class_ordered=True)
    started, release = threading.Event(), threading.Event()
    ticket = front_end.submit(0, lambda: (started.set(), release.wait()))
    assert started.wait(10)
    assert not ticket.withdraw()
    release.set()
    front_end.close()


def test_a_front_end_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        FrontEnd(workers=0, class_ordered=True)
