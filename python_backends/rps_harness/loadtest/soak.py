"""The overload soak: repeated load-and-drain cycles of a mixed workload at a multiple of the rate the
server sustains, checking that every request ends, memory does not grow and the KV cache comes back.

The sustainable rate is measured closed-loop (a fixed number of requests always in flight, the
throughput they reach) unless given. Each cycle then sends Poisson arrivals at `rate_factor` times that
rate on one gRPC stream (the same arrivals every cycle: times, modalities, prompt and output lengths;
fresh text and pixels), waits for every request's final response and for the server to drain, and
reads the resident memory of the server's process tree.
Requests beyond the server's `max_pending_requests` are refused at once (counted as rejected, not as
errors). The first cycle is the warm-up: the multimodal caches fill and the allocators reach the
high-water mark of a full overload backlog. Memory growth compares the drained memory after the last
cycle with that after the first, so what remains is what each further identical cycle leaves behind.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rps_harness.client import Generation, StreamClient
from rps_harness.loadtest.capacity import measure_capacity, request_stream
from rps_harness.loadtest.server_stats import (
    MetricsSnapshot,
    backend_shm_bytes,
    scrape,
    server_process,
    tree_rss_by_process,
)
from rps_harness.local.server import Endpoints
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.request_format import RequestFormat
from rps_serve.triton import protocol as p

logger = logging.getLogger(__name__)

MAX_RSS_GROWTH = 0.10
# The demo's request sizes: long texts of up to ~1.8K tokens, answers of 4-32 tokens.
SOAK_CONTENT = ContentLimits(max_text_tokens=2048, min_output_tokens=4, max_output_tokens=32)


@dataclass(frozen=True)
class SoakConfig:
    duration_s: float = 20 * 60  # offered-load time over all cycles (drains come on top)
    cycles: int = 4  # the first is the warm-up; growth is measured over the others
    rate: float | None = None  # requests per second the server sustains; measured when None
    rate_factor: float = 1.5
    calibrate_s: float = 120.0
    calibrate_concurrency: int = 16
    mix: str = "mixed-iii"
    seed: int = 0
    sample_s: float = 5.0
    drain_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.cycles < 2:
            raise ValueError("the soak needs at least 2 cycles: the first is the warm-up")

    @property
    def cycle_s(self) -> float:
        return self.duration_s / self.cycles


@dataclass(frozen=True)
class CycleReport:
    """One load-and-drain cycle; memory read once the server has drained (and its peak under load)."""

    sent: int
    completed: int
    rejected: int  # refused for overload (`max_pending_requests`), answered at once
    errors: int  # other errors
    lost: int
    rss_drained_bytes: int
    rss_peak_bytes: int
    rss_drained_by_process: dict[str, int]
    shm_drained_by_stub: dict[str, int]  # Python-backend regions, inside both triton's and the stub's RSS
    kv_usage_peak: float
    kv_usage_after_drain: float
    queue_depth_peak: float
    queue_depth_after_drain: float
    pending_after_drain: float
    drain_s: float  # from the last arrival until every response came and the server was idle
    error_examples: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SoakReport:
    sustainable_rate: float
    offered_rate: float
    cycle_s: float
    kv_usage_before: float
    cycles: list[CycleReport]

    @property
    def rss_growth(self) -> float:
        """Drained memory after the last cycle relative to that after the first (the warm-up)."""
        return self.cycles[-1].rss_drained_bytes / self.cycles[0].rss_drained_bytes - 1.0

    def failures(self) -> list[str]:
        """What the soak requires, as messages for each requirement not met (empty when all are)."""
        failed = []
        if lost := sum(c.lost for c in self.cycles):
            failed.append(f"{lost} requests got no final response")
        if self.rss_growth >= MAX_RSS_GROWTH:
            failed.append(
                f"resident memory after the drain grew {self.rss_growth:.1%} from the first cycle to the "
                f"last (limit {MAX_RSS_GROWTH:.0%})"
            )
        for n, c in enumerate(self.cycles, 1):
            if c.kv_usage_after_drain > self.kv_usage_before:
                failed.append(
                    f"cycle {n}: KV cache usage {c.kv_usage_after_drain:.4f} after drain, "
                    f"{self.kv_usage_before:.4f} before"
                )
            if c.queue_depth_after_drain or c.pending_after_drain:
                failed.append(
                    f"cycle {n} after drain: queue depth {c.queue_depth_after_drain:.0f}, "
                    f"pending requests {c.pending_after_drain:.0f}"
                )
        return failed

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rss_growth": self.rss_growth, "failures": self.failures()}


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

    def rss_by_process(self) -> dict[str, int]:
        value = tree_rss_by_process(self.process)
        self.rss_peak = max(self.rss_peak, sum(value.values()))
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.rss_by_process()
            metrics = scrape(self.endpoints.metrics_url)
            self.kv_peak = max(self.kv_peak, metrics.total("rps_kv_cache_usage", model=p.VLLM_MODEL))
            self.queue_peak = max(self.queue_peak, metrics.total("rps_queue_depth", model=p.VLLM_MODEL))

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_soak(
    endpoints: Endpoints, served: RequestFormat, config: SoakConfig, model: str = p.ENSEMBLE
) -> SoakReport:
    """Measure (or take) the sustainable rate, then run the load-and-drain cycles at `rate_factor` x it."""
    if config.rate is None:
        calibration = request_stream(
            config.mix, served, config.seed + 7919, content_seed=config.seed + 7919, limits=SOAK_CONTENT
        )
        rate = measure_capacity(
            endpoints.grpc_url, calibration, config.calibrate_s, config.calibrate_concurrency, model
        ).rate
    else:
        rate = config.rate
    offered = rate * config.rate_factor
    logger.info(
        "sustainable rate %.2f req/s; soaking at %.2f req/s in %d cycles of %.0f s",
        rate,
        offered,
        config.cycles,
        config.cycle_s,
    )
    kv_before = scrape(endpoints.metrics_url).total("rps_kv_cache_usage", model=p.VLLM_MODEL)
    arrivals = np.cumsum(
        np.random.default_rng(config.seed).exponential(1.0 / offered, int(offered * config.cycle_s) + 1)
    )
    arrivals = arrivals[arrivals < config.cycle_s]
    cycles = []
    for n in range(config.cycles):
        # Every cycle sends the same requests with fresh text and pixels (no cache hit between cycles), so
        # none asks of memory more than the warm-up did: growth after it is what the cycles leave behind.
        requests = request_stream(
            config.mix, served, config.seed, content_seed=config.seed + ((n + 1) << 32), limits=SOAK_CONTENT
        )
        cycles.append(_run_cycle(endpoints, model, config, arrivals, requests, f"s{n}-"))
        logger.info("cycle %d of %d: %s", n + 1, config.cycles, cycle_row(cycles[-1]))
    return SoakReport(
        sustainable_rate=rate,
        offered_rate=offered,
        cycle_s=config.cycle_s,
        kv_usage_before=kv_before,
        cycles=cycles,
    )


def _run_cycle(
    endpoints: Endpoints,
    model: str,
    config: SoakConfig,
    arrivals: np.ndarray,
    requests: Iterator[Generation],
    prefix: str,
) -> CycleReport:
    """Send one cycle's arrivals, wait for every response and for the server to drain."""
    client = StreamClient(endpoints.grpc_url)
    with _Sampler(endpoints, config.sample_s) as sampler:
        start = time.monotonic()
        try:
            for row, at in enumerate(arrivals):
                request = next(requests)  # built before its time comes, so arrivals stay on time
                time.sleep(max(0.0, start + at - time.monotonic()))
                client.submit(model, f"{prefix}{row}", request.tensors())
            tally = client.wait_all(time.monotonic() + config.drain_timeout_s)
            results = [client.results[f"{prefix}{row}"] for row in range(len(arrivals))]
        finally:
            client.close(cancel_requests=True)
        metrics = _drained(endpoints, timeout_s=120.0)
        drain_s = time.monotonic() - start - config.cycle_s
        rss = sampler.rss_by_process()
    errors = [r.error for r in results if r.error and not r.refused]
    errors += [e for e in client.unattributed_errors if not p.is_refusal(e)]
    return CycleReport(
        sent=tally.sent,
        completed=tally.completed,
        rejected=tally.refused,
        errors=tally.failed,
        lost=tally.lost,
        rss_drained_bytes=sum(rss.values()),
        rss_peak_bytes=sampler.rss_peak,
        rss_drained_by_process=rss,
        shm_drained_by_stub=backend_shm_bytes(sampler.process),
        kv_usage_peak=sampler.kv_peak,
        kv_usage_after_drain=metrics.total("rps_kv_cache_usage", model=p.VLLM_MODEL),
        queue_depth_peak=sampler.queue_peak,
        queue_depth_after_drain=metrics.total("rps_queue_depth", model=p.VLLM_MODEL),
        pending_after_drain=metrics.total("nv_inference_pending_request_count"),
        drain_s=drain_s,
        error_examples=sorted(set(errors))[:5],
    )


def cycle_row(cycle: CycleReport) -> str:
    """One cycle as a line of the soak's table (see `CYCLE_HEADER`)."""
    gb = 1e9
    return (
        f"{cycle.sent:6d} {cycle.completed:9d} {cycle.rejected:8d} {cycle.errors:6d} {cycle.lost:4d} "
        f"{cycle.rss_drained_bytes / gb:9.2f} {cycle.rss_peak_bytes / gb:9.2f} "
        f"{cycle.queue_depth_peak:10.0f} {cycle.drain_s:8.0f}"
    )


CYCLE_HEADER = "  sent completed rejected errors lost drained GB   peak GB queue peak  drain s"


def _drained(endpoints: Endpoints, timeout_s: float) -> MetricsSnapshot:
    """Metrics once the engine has no request left, or after `timeout_s` (the report shows what is left)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = scrape(endpoints.metrics_url)
        idle = (
            metrics.total("rps_queue_depth", model=p.VLLM_MODEL) == 0
            and metrics.total("rps_kv_cache_usage", model=p.VLLM_MODEL) == 0
            and metrics.total("nv_inference_pending_request_count") == 0
        )
        if idle or time.monotonic() > deadline:
            return metrics
        time.sleep(1.0)
