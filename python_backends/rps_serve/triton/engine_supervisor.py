"""Keeps `vllm_model`'s engine serving: notices a dead vLLM engine and restarts it in place.

vLLM's `AsyncLLM` marks itself `errored` once its engine-core process dies, or once that process loses
a worker (it shuts down and tells the client), and fails the requests it holds with `EngineDeadError`;
it never starts again by itself. The supervisor polls that flag on the model's event loop, refuses new
requests while the engine is down, and builds a new engine with the same arguments off the loop, so
that the loop keeps answering. An engine still down past its restart deadline (`overdue`) is not
expected back by itself, though the attempts go on; if every attempt fails it gives up (`failed`):
the model then asks Triton to unload it. In both states the replica needs replacing, which the
liveness probe reads (`rps_serve.probe`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

HEALTH_POLL_S = 1.0  # how often the engine's health is read: a dead engine is noticed within this
RESTART_ATTEMPTS = 3
SHUTDOWN_TIMEOUT_S = 10.0  # for what is left of a dead engine's processes to go
# Unless model.json sets it, an engine must be back within this multiple of its first start, which read
# the weights from a cold cache (a restart finds them cached), plus the dead engine's shutdown, and never
# sooner than the floor: past it, the replica is replaced rather than waited for.
RESTART_DEADLINE_FACTOR = 3.0
RESTART_DEADLINE_MIN_S = 120.0


class EngineState(enum.Enum):
    SERVING = "serving"
    RESTARTING = "restarting"
    OVERDUE = "overdue"  # still restarting past its deadline: not expected back by itself
    FAILED = "failed"  # every restart attempt failed: the model cannot serve again

    @property
    def recovering(self) -> bool:
        """Whether the engine serves or is expected to serve again without the replica being replaced."""
        return self in (EngineState.SERVING, EngineState.RESTARTING)


def restart_deadline_s(first_start_s: float) -> float:
    """How long a dead engine may take to serve again, from how long its first start took."""
    return max(RESTART_DEADLINE_MIN_S, RESTART_DEADLINE_FACTOR * first_start_s + 2 * SHUTDOWN_TIMEOUT_S)


def engine_dead(engine: Any) -> bool:
    """Whether vLLM's `AsyncLLM` says its engine can no longer serve."""
    return bool(engine.errored)


class EngineSupervisor:
    """Owns the engine: `engine` is the one serving now; `state` says whether it can take requests.

    `build` makes a new engine with the model's arguments (blocking: it runs in a thread);
    `on_started` finishes setting one up on the loop before it serves; `on_state` hears every change
    of state (metrics, unloading the model when it fails); `deadline_s` is how long after a death the
    engine may take to serve again before it is `OVERDUE`."""

    def __init__(
        self,
        engine: Any,
        build: Callable[[], Any],
        on_started: Callable[[Any], Awaitable[None]],
        on_state: Callable[[EngineState], None],
        deadline_s: float,
        attempts: int = RESTART_ATTEMPTS,
        poll_s: float = HEALTH_POLL_S,
    ) -> None:
        self.engine = engine
        self.state = EngineState.SERVING
        self.restarts = 0
        self._build = build
        self._on_started = on_started
        self._on_state = on_state
        self._attempts = attempts
        self._poll_s = poll_s
        self.deadline_s = deadline_s

    @property
    def serving(self) -> bool:
        return self.state is EngineState.SERVING

    async def watch(self) -> None:
        """Run on the model's loop for the model's life: restart the engine each time it dies."""
        while self.state is not EngineState.FAILED:
            await asyncio.sleep(self._poll_s)
            if engine_dead(self.engine):
                await self.restart()

    async def restart(self) -> None:
        """Replace the dead engine with a new one built from the same arguments."""
        self._set(EngineState.RESTARTING)
        logger.error("vllm_model: the vLLM engine died; restarting it (restart %d)", self.restarts + 1)
        loop = asyncio.get_running_loop()
        overdue = loop.call_later(self.deadline_s, self._overdue)
        try:
            await self._restart()
        finally:
            overdue.cancel()

    async def _restart(self) -> None:
        await self._shut_down(self.engine)
        loop = asyncio.get_running_loop()
        for attempt in range(1, self._attempts + 1):
            engine = None
            try:
                engine = await loop.run_in_executor(None, self._build)
                await self._on_started(engine)
            except Exception:
                logger.exception(
                    "vllm_model: engine restart attempt %d of %d failed", attempt, self._attempts
                )
                if engine is not None:  # built, but could not be set up: its processes must go
                    await self._shut_down(engine)
                continue
            self.engine = engine
            self.restarts += 1
            logger.info("vllm_model: engine restarted (restart %d)", self.restarts)
            self._set(EngineState.SERVING)
            return
        logger.error("vllm_model: the engine could not be restarted; the model cannot serve")
        self._set(EngineState.FAILED)

    async def _shut_down(self, engine: Any) -> None:
        """Let what is left of a dead engine (its processes, sockets) go before a new one starts."""
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.run_in_executor(None, lambda: engine.shutdown(timeout=SHUTDOWN_TIMEOUT_S)),
                SHUTDOWN_TIMEOUT_S * 2,
            )
        except Exception:
            logger.exception("vllm_model: shutting the dead engine down failed; starting a new one anyway")

    def _overdue(self) -> None:
        if self.state is EngineState.RESTARTING:
            logger.error(
                "vllm_model: the vLLM engine is still down %.0f s after it died, past its restart deadline: "
                "the replica needs replacing (restart attempts go on)",
                self.deadline_s,
            )
            self._set(EngineState.OVERDUE)

    def _set(self, state: EngineState) -> None:
        self.state = state
        self._on_state(state)
