"""A vLLM stat logger that hands the engine's KV-cache usage to the model's metrics after every step."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase


class KvCacheUsageLogger(StatLoggerBase):
    """vLLM calls `record` with the scheduler's stats of each step that produced outputs. Every update
    of a Triton metric is a message to the server, so the usage goes out when it changes, at most every
    `period_s`, and at once when it reaches 0 (a drained engine must read 0)."""

    def __init__(self, report: Callable[[float], None], period_s: float = 0.5) -> None:
        self._report = report
        self._period_s = period_s
        self._last: float | None = None
        self._last_s = 0.0

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is None:
            return
        usage, now = float(scheduler_stats.kv_cache_usage), time.monotonic()
        if usage != self._last and (usage == 0.0 or now - self._last_s >= self._period_s):
            self._report(usage)
            self._last, self._last_s = usage, now

    def log_engine_initialized(self) -> None:
        """Nothing to say: the gauge starts at 0."""


def kv_cache_usage_logger(report: Callable[[float], None]) -> Callable[[Any, int], StatLoggerBase]:
    """A per-engine factory for `AsyncLLM(stat_loggers=[...])`."""
    return lambda vllm_config, engine_index: KvCacheUsageLogger(report)
