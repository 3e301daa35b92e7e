"""The work of one scheduling iteration does not grow with the queue: counted, not timed."""

from __future__ import annotations

from rps_serve.scheduling.holding import DecodeHolds
from rps_serve.scheduling.parameters import Policy, class_ladder
from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.regulator import PriorityRegulator

SAND, PEBBLES, ROCKS = 0, 1, 2
MAX_HOLD_S = 0.5
STEP_S = 0.01
TAKEN = 4  # requests an iteration peeks at and leaves waiting (the KV cache is full, as in the benchmark)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Request:
    """A waiting request; weakly referable, as vLLM's are."""

    def __init__(self, level: int, media: bool) -> None:
        self.level, self.media = level, media


def _work_per_step(waiting: int, steps: int = 6) -> list[int]:
    """Entries scored and compared plus holds decided and checked, per iteration, for `waiting`
    requests (texts, images, videos) beside two running sand requests, half the media in a hold
    throughout, the other half released."""
    clock = Clock()
    queues: ClassQueues[Request] = ClassQueues(PriorityRegulator(Policy.RPS, class_ladder(3)), clock=clock)
    holds: DecodeHolds[Request] = DecodeHolds(MAX_HOLD_S, 3)
    requests = [Request(i % 3, media=i % 3 > 0) for i in range(waiting)]
    running = {"sand-0": SAND, "sand-1": SAND}
    work = []
    for step in range(steps):
        if step == 1:  # half of the requests arrive a little later: their holds outlast the first half's
            clock.now = MAX_HOLD_S / 2
        for request in (
            requests[: waiting // 2] if step == 0 else requests[waiting // 2 :] if step == 1 else []
        ):
            group = holds.arrived(request, request.level, exempt=not request.media)
            queues.add(request, request.level, clock.now, group)
        if step >= 2:
            clock.now = MAX_HOLD_S + step * STEP_S  # past the first half's holds, not the second's
        before = queues.visited + holds.checks
        queues.begin_iteration()
        begun, ended = holds.step(running, clock.now, queues.__contains__)
        for group in ended:
            queues.unpark(group)
        for group, members in begun:
            queues.park(members, group)
        queues.skip_groups(holds.in_force)
        for _ in range(TAKEN):
            queues.peek()
        queues.unskip()
        work.append(queues.visited + holds.checks - before)
    return work


def test_the_work_of_an_iteration_does_not_grow_with_the_queue() -> None:
    """The steps that decide new requests' holds pay once per request; the others pay the same for
    64 waiting as for 4,096, holds in force and released alike."""
    small, large = _work_per_step(64), _work_per_step(4096)
    assert large[2:] == small[2:]
    assert max(large[2:]) < 64
