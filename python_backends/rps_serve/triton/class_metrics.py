"""Per-class metrics of the vllm_model on Triton's Prometheus endpoint (custom metrics API).

Where they are measured: the RPS scheduler runs in vLLM's engine-core process, out of reach of the
Triton model, so the model measures what it can see for each request, whose class it knows:
- `rps_requests_total`: requests handed to the engine;
- `rps_queue_depth`: requests in the engine that have not produced their first token yet
  (waiting in the class queue or in prefill);
- `rps_wait_seconds` (histogram) and `rps_wait_seconds_total`: from arrival at vllm_model to the
  first token;
- `rps_front_end_queue_seconds_total` and `rps_front_end_work_seconds_total`: of that, the seconds
  a request waited for a front-end worker, and the seconds the worker spent on it (decoding its media,
  vLLM's input processing) until it was handed to the engine; the rest of the wait is the engine's
  (its queue, prefill, and vLLM's own input processing where vLLM renders);
- `rps_preemptions_total`: the engine's preemptions of the class's requests (vLLM reports them per
  request in `RequestOutput.metrics`), counted when the request ends;
- `rps_cancelled_total`: requests the client cancelled mid-flight, aborted in the engine.
Every metric carries the labels `model` and `rps_class` (sand, pebbles, rocks), except those with the
label `model` only: the engine's load after its latest step, as vLLM's scheduler reports it
(`triton.engine_stats`), in the three gauges a router's endpoint picker reads from each replica
(`ENGINE_LOAD_GAUGES`, named after vLLM's own; docs/deploy.md): `rps_num_requests_waiting` and
`rps_num_requests_running`, the engine's waiting and running requests, and `rps_kv_cache_usage`, its
KV-cache usage (0-1), so that a drained engine reads 0, 0 and 0 unless blocks leaked;
`rps_rejected_total`, requests refused unread because `max_pending_requests` were in flight; and the
engine's own two (`triton.engine_supervisor`): `rps_engine_restarts_total`, the times the engine died
and was restarted in place, and `rps_engine_up`, 1 while the engine can serve, 0 while it restarts or
after it could not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rps_serve.requests import RequestClass

WAIT_BUCKETS_S = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0]

QUEUE_DEPTH = "rps_queue_depth"
WAITING_REQUESTS = "rps_num_requests_waiting"
RUNNING_REQUESTS = "rps_num_requests_running"
KV_CACHE_USAGE = "rps_kv_cache_usage"
# The engine's load as a router's endpoint picker reads it from each replica: one gauge each, label
# `model` only, because a picker takes one series per metric rather than summing the classes.
ENGINE_LOAD_GAUGES = (WAITING_REQUESTS, RUNNING_REQUESTS, KV_CACHE_USAGE)


@dataclass(frozen=True)
class EngineLoad:
    """The engine's load after a step: requests waiting (deferred ones included, as vLLM's own
    `vllm:num_requests_waiting` counts them) and running, and the KV cache's usage (0-1)."""

    waiting: int
    running: int
    kv_cache_usage: float

    @property
    def drained(self) -> bool:
        return self.waiting == 0 and self.running == 0


class ClassMetrics:
    """One series per class for each metric; `pb_utils` is the Python backend's utility module."""

    def __init__(self, pb_utils: Any, model: str) -> None:
        family = pb_utils.MetricFamily
        # A family must outlive its metrics, or updating them fails.
        self._families: list[Any] = []

        def metrics(name: str, description: str, kind: Any, **extra: Any) -> dict[RequestClass, Any]:
            created = family(name=name, description=description, kind=kind)
            self._families.append(created)
            return {
                c: created.Metric(labels={"model": model, "rps_class": c.label}, **extra)
                for c in RequestClass
            }

        self._requests = metrics("rps_requests_total", "Requests handed to the engine", family.COUNTER)
        self._queue = metrics(
            QUEUE_DEPTH, "Requests in the engine waiting for their first token", family.GAUGE
        )
        self._wait_total = metrics(
            "rps_wait_seconds_total", "Seconds from arrival to first token, summed", family.COUNTER
        )
        # Histograms came to the Python backend's metrics API after some Triton releases.
        self._wait = (
            metrics(
                "rps_wait_seconds",
                "Seconds from arrival to first token",
                family.HISTOGRAM,
                buckets=WAIT_BUCKETS_S,
            )
            if hasattr(family, "HISTOGRAM")
            else None
        )
        self._front_end_queue = metrics(
            "rps_front_end_queue_seconds_total",
            "Seconds from arrival to a front-end worker taking the request, summed",
            family.COUNTER,
        )
        self._front_end_work = metrics(
            "rps_front_end_work_seconds_total",
            "Seconds a front-end worker spent on the request (decoding, input processing), summed",
            family.COUNTER,
        )
        self._preemptions = metrics(
            "rps_preemptions_total", "Engine preemptions of the class's requests", family.COUNTER
        )
        self._cancelled = metrics(
            "rps_cancelled_total", "Requests cancelled by the client and aborted", family.COUNTER
        )

        def gauge(name: str, description: str) -> Any:
            created = family(name=name, description=description, kind=family.GAUGE)
            self._families.append(created)
            return created.Metric(labels={"model": model})

        self._waiting = gauge(WAITING_REQUESTS, "Requests waiting in the engine after its latest step")
        self._running = gauge(RUNNING_REQUESTS, "Requests running in the engine after its latest step")
        self._kv_usage = gauge(KV_CACHE_USAGE, "KV cache usage (0-1) after the engine's latest step")
        rejected_family = family(
            name="rps_rejected_total",
            description="Requests refused because max_pending_requests were in flight",
            kind=family.COUNTER,
        )
        self._families.append(rejected_family)
        self._rejected = rejected_family.Metric(labels={"model": model})
        restarts_family = family(
            name="rps_engine_restarts_total",
            description="Times the vLLM engine died and was restarted in place",
            kind=family.COUNTER,
        )
        up_family = family(
            name="rps_engine_up",
            description="1 while the vLLM engine can serve, 0 while it restarts or could not",
            kind=family.GAUGE,
        )
        self._families += [restarts_family, up_family]
        self._restarts = restarts_family.Metric(labels={"model": model})
        self._engine_up = up_family.Metric(labels={"model": model})
        self._engine_up.set(1)

    def close(self) -> None:
        """Drop the metrics before their families: the other order crashes the stub at shutdown."""
        for series in (
            self._requests,
            self._queue,
            self._wait_total,
            self._wait,
            self._front_end_queue,
            self._front_end_work,
            self._preemptions,
            self._cancelled,
        ):
            if series is not None:
                series.clear()
        del self._waiting, self._running, self._kv_usage
        del self._rejected, self._restarts, self._engine_up
        self._families.clear()

    def admitted(self, cls: RequestClass) -> None:
        self._requests[cls].increment(1)
        self._queue[cls].increment(1)

    def first_token(self, cls: RequestClass, wait_s: float) -> None:
        self._queue[cls].increment(-1)
        self._wait_total[cls].increment(wait_s)
        if self._wait is not None:
            self._wait[cls].observe(wait_s)

    def front_end(self, cls: RequestClass, queued_s: float, work_s: float) -> None:
        self._front_end_queue[cls].increment(queued_s)
        self._front_end_work[cls].increment(work_s)

    def engine_load(self, load: EngineLoad) -> None:
        self._waiting.set(load.waiting)
        self._running.set(load.running)
        self._kv_usage.set(load.kv_cache_usage)

    def rejected(self) -> None:
        self._rejected.increment(1)

    def engine_restarted(self) -> None:
        self._restarts.increment(1)

    def engine_up(self, up: bool) -> None:
        self._engine_up.set(1 if up else 0)

    def ended(self, cls: RequestClass, preemptions: int, got_first_token: bool, cancelled: bool) -> None:
        if not got_first_token:
            self._queue[cls].increment(-1)
        if preemptions:
            self._preemptions[cls].increment(preemptions)
        if cancelled:
            self._cancelled[cls].increment(1)
