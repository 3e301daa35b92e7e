"""The overload soak: a mixed workload at a multiple of the rate the server sustains, then a drain,
checking that every request ends, memory does not grow and the engine gives back its KV cache.

The sustainable rate is measured closed-loop (a fixed number of requests always in flight, the
throughput they reach) unless given. The soak then sends Poisson arrivals at `rate_factor` times that
rate for the configured time on one gRPC stream, samples the resident memory of the server's process
tree and its metrics, waits for every request's final response, and drains.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from itertools import count
from typing import Any

import numpy as np

from rps_serve.bench.replay import ENSEMBLE, generation
from rps_serve.bench.server_stats import MetricsSnapshot, scrape, server_process, tree_rss_bytes
from rps_serve.tiny_model import TinyModelSpec
from rps_serve.triton.client import Generation, StreamClient
from rps_serve.triton.server import Endpoints
from rps_serve.workload.content import ContentLimits, plan_content
from rps_serve.workload.mixes import mix_by_name
from rps_serve.workload.trace import generate_trace

logger = logging.getLogger(__name__)

VLLM_MODEL = "vllm_model"
MAX_RSS_GROWTH = 0.10
# The demo's request sizes: long texts of up to ~1.8K tokens, answers of 4-32 tokens.
SOAK_CONTENT = ContentLimits(max_text_tokens=2048, min_output_tokens=4, max_output_tokens=32)


@dataclass(frozen=True)
class SoakConfig:
    duration_s: float = 20 * 60
    rate: float | None = None  # requests per second the server sustains; measured when None
    rate_factor: float = 1.5
    warm_up_fraction: float = 0.2  # memory is compared from the end of this part of the run
    calibrate_s: float = 120.0
    calibrate_concurrency: int = 16
    mix: str = "mixed-iii"
    seed: int = 0
    sample_s: float = 5.0
    drain_timeout_s: float = 900.0


@dataclass(frozen=True)
class SoakReport:
    sustainable_rate: float
    offered_rate: float
    duration_s: float
    sent: int
    completed: int
    errors: int
    lost: int
    rss_after_warm_up_bytes: int
    rss_peak_bytes: int
    rss_after_drain_bytes: int
    kv_usage_before: float
    kv_usage_after_drain: float
    kv_usage_peak: float
    queue_depth_peak: float
    queue_depth_after_drain: float
    pending_after_drain: float
    drain_s: float
    error_examples: list[str] = field(default_factory=list)

    @property
    def rss_growth(self) -> float:
        return self.rss_after_drain_bytes / self.rss_after_warm_up_bytes - 1.0

    def failures(self) -> list[str]:
        """What the soak requires, as messages for each requirement not met (empty when all are)."""
        failed = []
        if self.lost:
            failed.append(f"{self.lost} requests got no final response")
        if self.rss_growth >= MAX_RSS_GROWTH:
            failed.append(
                f"resident memory grew {self.rss_growth:.1%} after warm-up (limit {MAX_RSS_GROWTH:.0%})"
            )
        if self.kv_usage_after_drain > self.kv_usage_before:
            failed.append(
                f"KV cache usage {self.kv_usage_after_drain:.4f} after drain, "
                f"{self.kv_usage_before:.4f} before"
            )
        if self.queue_depth_after_drain or self.pending_after_drain:
            failed.append(
                f"after drain: queue depth {self.queue_depth_after_drain:.0f}, "
                f"pending requests {self.pending_after_drain:.0f}"
            )
        return failed

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rss_growth": self.rss_growth, "failures": self.failures()}


def request_stream(mix: str, media: TinyModelSpec, seed: int) -> Iterator[Generation]:
    """Endless fresh requests of the mix (new text and pixels each), in batches of a trace."""
    for batch in count():
        trace = generate_trace(mix_by_name(mix), 1.0, 256, seed + batch)
        for content in plan_content(trace, media, SOAK_CONTENT).contents(media, seed + batch):
            yield generation(content)


def measure_sustainable_rate(
    endpoints: Endpoints, media: TinyModelSpec, config: SoakConfig, model: str = ENSEMBLE
) -> float:
    """Completed requests per second with `calibrate_concurrency` requests always in flight."""
    requests = request_stream(config.mix, media, config.seed + 7919)
    lock = threading.Lock()
    deadline = time.monotonic() + config.calibrate_s
    done: list[float] = []

    def worker(index: int) -> None:
        client = StreamClient(endpoints.grpc_url)
        try:
            for n in count():
                with lock:
                    generation = next(requests)
                client.submit(model, f"c{index}-{n}", generation.tensors())
                client.wait(f"c{index}-{n}")
                if time.monotonic() > deadline:
                    return
                done.append(time.monotonic())
        finally:
            client.close()

    start = time.monotonic()
    with ThreadPoolExecutor(config.calibrate_concurrency) as pool:
        list(pool.map(worker, range(config.calibrate_concurrency)))
    return len(done) / (time.monotonic() - start)


class _Sampler:
    """Samples the server's memory and metrics every `period_s` on a thread of its own."""

    def __init__(self, endpoints: Endpoints, period_s: float) -> None:
        self.endpoints = endpoints
        self.process = server_process(endpoints.grpc_port)
        self.period_s = period_s
        self.rss_peak = 0
        self.kv_peak = 0.0
        self.queue_peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def rss(self) -> int:
        value = tree_rss_bytes(self.process)
        self.rss_peak = max(self.rss_peak, value)
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.rss()
            metrics = scrape(self.endpoints.metrics_url)
            self.kv_peak = max(self.kv_peak, metrics.total("rps_kv_cache_usage", model=VLLM_MODEL))
            self.queue_peak = max(self.queue_peak, metrics.total("rps_queue_depth", model=VLLM_MODEL))

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_soak(
    endpoints: Endpoints, media: TinyModelSpec, config: SoakConfig, model: str = ENSEMBLE
) -> SoakReport:
    """Measure (or take) the sustainable rate, overload the server at `rate_factor` times it, drain."""
    rate = config.rate or measure_sustainable_rate(endpoints, media, config, model)
    offered = rate * config.rate_factor
    logger.info(
        "sustainable rate %.2f req/s; soaking at %.2f req/s for %.0f s", rate, offered, config.duration_s
    )
    kv_before = scrape(endpoints.metrics_url).total("rps_kv_cache_usage", model=VLLM_MODEL)
    arrivals = np.cumsum(
        np.random.default_rng(config.seed).exponential(1.0 / offered, int(offered * config.duration_s) + 1)
    )
    arrivals = arrivals[arrivals < config.duration_s]
    requests = request_stream(config.mix, media, config.seed)
    client = StreamClient(endpoints.grpc_url)
    rss_warm = 0
    with _Sampler(endpoints, config.sample_s) as sampler:
        start = time.monotonic()
        try:
            for row, at in enumerate(arrivals):
                generation = next(requests)  # built before its time comes, so arrivals stay on time
                if not rss_warm and at >= config.warm_up_fraction * config.duration_s:
                    rss_warm = sampler.rss()
                time.sleep(max(0.0, start + at - time.monotonic()))
                client.submit(model, f"s{row}", generation.tensors())
            lost, unattributed = _wait_all(client, config.drain_timeout_s)
            results = [client.results[f"s{row}"] for row in range(len(arrivals))]
        finally:
            client.close()
        drained_at = time.monotonic()
        metrics = _drained(endpoints, timeout_s=120.0)
        rss_end = sampler.rss()
    errors = [r.error for r in results if r.error] + unattributed
    return SoakReport(
        sustainable_rate=rate,
        offered_rate=offered,
        duration_s=config.duration_s,
        sent=len(arrivals),
        completed=sum(r.error is None and r.done_s is not None for r in results),
        errors=len(errors),
        lost=lost,
        rss_after_warm_up_bytes=rss_warm or sampler.rss(),
        rss_peak_bytes=sampler.rss_peak,
        rss_after_drain_bytes=rss_end,
        kv_usage_before=kv_before,
        kv_usage_after_drain=metrics.total("rps_kv_cache_usage", model=VLLM_MODEL),
        kv_usage_peak=sampler.kv_peak,
        queue_depth_peak=sampler.queue_peak,
        queue_depth_after_drain=metrics.total("rps_queue_depth", model=VLLM_MODEL),
        pending_after_drain=metrics.total("nv_inference_pending_request_count"),
        drain_s=drained_at - start - config.duration_s,
        error_examples=sorted(set(errors))[:5],
    )


def _wait_all(client: StreamClient, timeout_s: float) -> tuple[int, list[str]]:
    """Wait until every request has ended; (requests that did not, errors the stream did not attribute).

    An error on a stream shared by many requests does not say whose it is (tritonclient drops the id),
    so a request counts as ended when it got its final response or one of those errors stands for it.
    """
    deadline = time.monotonic() + timeout_s
    while len(client.pending()) > len(client.unattributed_errors) and time.monotonic() < deadline:
        time.sleep(0.5)
    unattributed = list(client.unattributed_errors)
    return max(0, len(client.pending()) - len(unattributed)), unattributed


def _drained(endpoints: Endpoints, timeout_s: float) -> MetricsSnapshot:
    """Metrics once the engine has no request left, or after `timeout_s` (the report shows what is left)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = scrape(endpoints.metrics_url)
        idle = (
            metrics.total("rps_queue_depth", model=VLLM_MODEL) == 0
            and metrics.total("rps_kv_cache_usage", model=VLLM_MODEL) == 0
            and metrics.total("nv_inference_pending_request_count") == 0
        )
        if idle or time.monotonic() > deadline:
            return metrics
        time.sleep(1.0)
