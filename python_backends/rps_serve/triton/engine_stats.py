"""A vLLM stat logger that hands the engine's KV-cache usage to the model's metrics after every step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase


class KvCacheUsageLogger(StatLoggerBase):
    """vLLM calls `record` with the scheduler's stats of each step that produced outputs."""

    def __init__(self, report: Callable[[float], None]) -> None:
        self._report = report

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is not None:
            self._report(float(scheduler_stats.kv_cache_usage))

    def log_engine_initialized(self) -> None:
        """Nothing to say: the gauge starts at 0."""


def kv_cache_usage_logger(report: Callable[[float], None]) -> Callable[[Any, int], StatLoggerBase]:
    """A per-engine factory for `AsyncLLM(stat_loggers=[...])`."""
    return lambda vllm_config, engine_index: KvCacheUsageLogger(report)
