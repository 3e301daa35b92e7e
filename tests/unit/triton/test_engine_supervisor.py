"""The engine supervisor restarts a dead engine in place, says when it is overdue, and gives up."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rps_serve.triton.engine_supervisor import (
    RESTART_DEADLINE_MIN_S,
    EngineState,
    EngineSupervisor,
    restart_deadline_s,
)


class _Engine:
    def __init__(self) -> None:
        self.errored = False
        self.shut_down = False

    def shutdown(self, timeout: float) -> None:
        self.shut_down = True


async def _started(engine: Any) -> None:
    pass


def _supervise(build_s: float, deadline_s: float, fails: bool = False) -> tuple[list[EngineState], Any]:
    """Kill a supervised engine, let its restart take `build_s` (or fail), and record every state."""
    states: list[EngineState] = []
    first = _Engine()

    def build() -> _Engine:
        time.sleep(build_s)
        if fails:
            raise RuntimeError("no engine")
        return _Engine()

    async def scenario() -> EngineSupervisor:
        supervisor = EngineSupervisor(
            first, build, _started, states.append, deadline_s=deadline_s, poll_s=0.01
        )
        watch = asyncio.ensure_future(supervisor.watch())
        await asyncio.sleep(0.05)
        first.errored = True
        while supervisor.state is not EngineState.FAILED and supervisor.restarts == 0:
            await asyncio.sleep(0.01)
        watch.cancel()
        return supervisor

    supervisor = asyncio.run(scenario())
    assert first.shut_down
    return states, supervisor


def test_a_restart_within_its_deadline_never_reads_overdue() -> None:
    states, supervisor = _supervise(build_s=0.05, deadline_s=5.0)
    assert states == [EngineState.RESTARTING, EngineState.SERVING]
    assert supervisor.restarts == 1 and supervisor.engine.errored is False


def test_a_restart_past_its_deadline_is_overdue_until_it_serves() -> None:
    states, supervisor = _supervise(build_s=0.3, deadline_s=0.1)
    assert states == [EngineState.RESTARTING, EngineState.OVERDUE, EngineState.SERVING]
    assert supervisor.serving


def test_an_engine_that_cannot_be_restarted_fails() -> None:
    states, supervisor = _supervise(build_s=0.0, deadline_s=5.0, fails=True)
    assert states == [EngineState.RESTARTING, EngineState.FAILED]
    assert not supervisor.serving


def test_only_serving_and_restarting_recover_by_themselves() -> None:
    assert {s for s in EngineState if s.recovering} == {EngineState.SERVING, EngineState.RESTARTING}


def test_the_deadline_follows_the_first_start_with_a_floor() -> None:
    assert restart_deadline_s(5.0) == RESTART_DEADLINE_MIN_S
    assert restart_deadline_s(300.0) > 3 * 300.0
