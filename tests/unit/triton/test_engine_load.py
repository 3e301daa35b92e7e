"""Each replica publishes its engine's load, after every step, in the three gauges a router's endpoint
picker reads: requests waiting, requests running, KV-cache usage."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rps_serve.triton.class_metrics import ENGINE_LOAD_GAUGES, ClassMetrics, EngineLoad
from rps_serve.triton.engine_stats import EngineStatsLogger
from tests.unit.triton.metrics_recorder import RecordingPbUtils


def _stats(waiting: int, running: int, kv: float, deferred: int = 0) -> Any:
    return SimpleNamespace(
        num_waiting_reqs=waiting,
        num_skipped_waiting_reqs=deferred,
        num_running_reqs=running,
        kv_cache_usage=kv,
    )


def test_the_load_is_one_gauge_per_quantity_labelled_with_the_model_only() -> None:
    pb_utils = RecordingPbUtils()
    metrics = ClassMetrics(pb_utils, "vllm_model")
    metrics.engine_load(EngineLoad(waiting=3, running=5, kv_cache_usage=0.25))
    for name, value in zip(ENGINE_LOAD_GAUGES, (3, 5, 0.25), strict=True):
        family = pb_utils.published[name]
        (series,) = family.series
        assert (family.kind, series.labels, series.value) == ("gauge", {"model": "vllm_model"}, value)
    metrics.close()


def test_waiting_counts_deferred_requests_as_vllm_does() -> None:
    reports: list[EngineLoad] = []
    EngineStatsLogger(reports.append, None, period_s=0.0).record(_stats(2, 4, 0.5, deferred=1), None)
    assert reports == [EngineLoad(waiting=3, running=4, kv_cache_usage=0.5)]


def test_changes_within_the_period_wait_but_a_drained_engine_reports_at_once() -> None:
    reports: list[EngineLoad] = []
    stats_logger = EngineStatsLogger(reports.append, None, period_s=3600.0)
    stats_logger.record(_stats(2, 4, 0.5), None)
    stats_logger.record(_stats(1, 5, 0.6), None)  # within the period: not sent
    stats_logger.record(_stats(0, 0, 0.1), None)  # drained (KV blocks still cached): sent at once
    stats_logger.record(_stats(0, 0, 0.1), None)  # unchanged: not sent again
    stats_logger.record(None, None)  # a step without scheduler stats says nothing
    assert reports == [EngineLoad(2, 4, 0.5), EngineLoad(0, 0, 0.1)]
