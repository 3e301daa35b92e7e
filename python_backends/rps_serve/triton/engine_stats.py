"""The vLLM stat logger of `vllm_model`: after every step, the engine's load (requests waiting and
running, KV-cache usage) to the model's metrics, the step's token and latency stats to its `vllm:*`
metrics (`triton.vllm_metrics`), and, with a run log (`triton.run_log`), the step's record."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from rps_serve.triton.class_metrics import EngineLoad
from rps_serve.triton.run_log import RunLog


class EngineStatsLogger(StatLoggerBase):
    """vLLM calls `record` with the scheduler's stats of each step (the step's details attached when
    the engine runs with `run_log.ITERATION_DETAILS_ARG`) and the outputs' iteration stats. Every
    update of a Triton metric is a message to the server, so the load goes out when it changes, at
    most every `period_s`, and at once when the engine drains or its KV usage reaches 0 (a drained
    engine must read 0, and no later step may come to correct it)."""

    def __init__(
        self,
        report: Callable[[EngineLoad], None],
        run_log: RunLog | None,
        period_s: float = 0.5,
        iterations: Callable[[Any], None] | None = None,
    ) -> None:
        self._report = report
        self._iterations = iterations  # hears every step's `IterationStats`
        self._run_log = run_log
        self._period_s = period_s
        self._last: EngineLoad | None = None
        self._last_s = -math.inf  # the first load goes out at once, however young the clock

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if iteration_stats is not None and self._iterations is not None:
            self._iterations(iteration_stats)
        if scheduler_stats is None:
            return
        load = EngineLoad(
            waiting=int(scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs),
            running=int(scheduler_stats.num_running_reqs),
            kv_cache_usage=float(scheduler_stats.kv_cache_usage),
        )
        now = time.monotonic()
        settled = load.drained or load.kv_cache_usage == 0.0
        if load != self._last and (settled or now - self._last_s >= self._period_s):
            self._report(load)
            self._last, self._last_s = load, now
        if self._run_log is not None:
            self._run_log.step(scheduler_stats, iteration_stats)

    def log_engine_initialized(self) -> None:
        """Nothing to say: the gauges start at 0."""


def engine_stats_logger(
    report: Callable[[EngineLoad], None],
    run_log: RunLog | None,
    iterations: Callable[[Any], None] | None = None,
) -> Callable[[Any, int], StatLoggerBase]:
    """A per-engine factory for `AsyncLLM(stat_loggers=[...])`."""
    return lambda vllm_config, engine_index: EngineStatsLogger(report, run_log, iterations=iterations)
