"""vLLM's own metrics on Triton's metrics endpoint, as NVIDIA's vllm_backend exports them.

vllm_backend (releases 25.01 to 26.01, its `src/utils/metrics.py`) feeds eight `vllm:*` families from
a vLLM stat logger through Triton's custom metrics API, labelled `model` and `version`: the token
counters, the time-to-first-token, inter-token (as `vllm:time_per_output_token_seconds`) and
end-to-end latency histograms, and the per-request prompt tokens, generation tokens and `n`
histograms, with its bucket boundaries. `VLLM_BACKEND_FAMILIES` are those, named, described, fed and
bucketed as there. `VLLM_FAMILIES` add, under vLLM's own Prometheus names, the scheduler's state
(`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`) and the time a
request spent in each phase (queue, prefill, decode, inference), which vLLM's own endpoint has and
vllm_backend does not export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm.v1.metrics.buckets import build_1_2_5_buckets, histogram_buckets

from rps_serve.triton.class_metrics import EngineLoad

COUNTER, GAUGE, HISTOGRAM = "COUNTER", "GAUGE", "HISTOGRAM"

# vllm_backend's bucket boundaries (its `TritonMetrics`)
TTFT_BUCKETS_S = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
TPOT_BUCKETS_S = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
E2E_BUCKETS_S = [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0]
N_BUCKETS = [1, 2, 5, 10, 20]

# What one engine step's stats give a family: the values to add (counter) or observe (histogram).
Values = Callable[[Any], Iterable[float]]


def _finished(field: str) -> Values:
    return lambda stats: [getattr(request, field) for request in stats.finished_requests]


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    kind: str
    values: Values | None = None  # from vLLM's `IterationStats`; None: a gauge of the engine's load
    buckets: Callable[[int], Sequence[float]] | None = None  # of the model's maximum length


VLLM_BACKEND_FAMILIES = (
    Family(
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        COUNTER,
        lambda stats: [stats.num_prompt_tokens],
    ),
    Family(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        COUNTER,
        lambda stats: [stats.num_generation_tokens],
    ),
    Family(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        HISTOGRAM,
        lambda stats: stats.time_to_first_tokens_iter,
        lambda _: TTFT_BUCKETS_S,
    ),
    Family(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        HISTOGRAM,
        lambda stats: stats.inter_token_latencies_iter,
        lambda _: TPOT_BUCKETS_S,
    ),
    Family(
        "vllm:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        HISTOGRAM,
        _finished("e2e_latency"),
        lambda _: E2E_BUCKETS_S,
    ),
    Family(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        HISTOGRAM,
        _finished("num_prompt_tokens"),
        build_1_2_5_buckets,
    ),
    Family(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        HISTOGRAM,
        _finished("num_generation_tokens"),
        build_1_2_5_buckets,
    ),
    Family(
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        HISTOGRAM,
        lambda stats: stats.n_params_iter,
        lambda _: N_BUCKETS,
    ),
)


def _phase(name: str, phase: str, field: str) -> Family:
    return Family(
        f"vllm:request_{name}_time_seconds",
        f"Histogram of time spent in {phase} phase for request.",
        HISTOGRAM,
        _finished(field),
        lambda _: histogram_buckets("request_latency"),
    )


NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
VLLM_FAMILIES = (
    Family(NUM_REQUESTS_RUNNING, "Number of requests in model execution batches.", GAUGE),
    Family(NUM_REQUESTS_WAITING, "Number of requests waiting to be processed.", GAUGE),
    Family(KV_CACHE_USAGE_PERC, "KV-cache usage. 1 means 100 percent usage.", GAUGE),
    _phase("queue", "WAITING", "queued_time"),
    _phase("prefill", "PREFILL", "prefill_time"),
    _phase("decode", "DECODE", "decode_time"),
    _phase("inference", "RUNNING", "inference_time"),
)


class VllmMetrics:
    """The `vllm:*` families with one series each, labelled `labels` (vllm_backend's: the model's
    name and version). `pb_utils` is the Python backend's utility module; every call into it must
    come from the thread that sends the model's responses (the stub's messages to the server from
    several threads at once crash it), which is where vLLM calls its stat loggers."""

    def __init__(self, pb_utils: Any, labels: Mapping[str, str], max_model_len: int) -> None:
        kinds = pb_utils.MetricFamily
        # A family must outlive its metrics, or updating them fails.
        self._families: list[Any] = []
        self._series: dict[str, tuple[Family, Any]] = {}
        for family in VLLM_BACKEND_FAMILIES + VLLM_FAMILIES:
            created = kinds(
                name=family.name, description=family.description, kind=getattr(kinds, family.kind)
            )
            self._families.append(created)
            extra = {} if family.buckets is None else {"buckets": list(family.buckets(max_model_len))}
            self._series[family.name] = (family, created.Metric(labels=dict(labels), **extra))

    def record(self, iteration_stats: Any) -> None:
        """One engine step's `IterationStats` (as vllm_backend: a counter is not sent a zero)."""
        for family, series in self._series.values():
            if family.values is None:
                continue
            for value in family.values(iteration_stats):
                if family.kind == HISTOGRAM:
                    series.observe(value)
                elif value:
                    series.increment(value)

    def engine_load(self, load: EngineLoad) -> None:
        self._series[NUM_REQUESTS_RUNNING][1].set(load.running)
        self._series[NUM_REQUESTS_WAITING][1].set(load.waiting)
        self._series[KV_CACHE_USAGE_PERC][1].set(load.kv_cache_usage)

    def close(self) -> None:
        """Drop the metrics before their families: the other order crashes the stub at shutdown."""
        self._series.clear()
        self._families.clear()
