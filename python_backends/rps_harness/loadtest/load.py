"""`rps-serve bench`: a workload trace against a running server, measured like `rps-serve simulate`.

Warm-up, then SLOs (each modality's TTFT with its requests sent one at a time, or a file), then the
trace at its arrival times over one gRPC stream while NVML samples GPU utilization; the report has
the simulator's JSON shape plus the isolated runs it took its SLOs from.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.client import Tally
from rps_harness.loadtest.gpu import GpuSampler
from rps_harness.loadtest.replay import build_requests, drain_allowance_s, one_at_a_time, replay, warm_up
from rps_harness.loadtest.server_stats import scrape
from rps_harness.loadtest.stages import stage_breakdown
from rps_harness.metrics import RequestRecords, grouped_metrics, slo_metrics
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.source import SyntheticWorkload, Workload
from rps_harness.workload.trace import Trace
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p

logger = logging.getLogger(__name__)

SLO_PERCENTILE = 99  # as `rps-serve simulate`: the SLO is the P99 of isolated TTFT
# Content seeds of the phases, offsets from the run's seed: no request repeats earlier content
# (prefix and multimodal caches would hit).
ISOLATED_SEED_OFFSET = 1
WARM_UP_SEED_OFFSET = 7919


@dataclass(frozen=True)
class BenchConfig:
    """One load run of `workload` against the server at `url`.

    `model` is the served model's directory: the client sizes images and videos to it. `seed` drives
    the content (filler text, pixels). `isolated` requests per modality set the SLOs unless `slo`
    names a JSON file {"text": s, "image": s, "video": s}.
    """

    url: str
    model: Path
    workload: Workload = field(default_factory=SyntheticWorkload)
    seed: int = 0
    label: str = "server"
    max_text_tokens: int = 4096
    max_output_tokens: int | None = None
    isolated: int = 3
    slo: Path | None = None
    progress: bool = True
    metrics_url: str | None = None  # the server's metrics endpoint: where each class waited (`stages`)
    ensemble: str = p.ENSEMBLE  # the model requests go to
    engine: str = p.VLLM_MODEL  # the engine model behind it, whose metrics say where requests waited
    drain_s: float | None = None  # the replay's deadline after its last request; None: `drain_allowance_s`

    @property
    def limits(self) -> ContentLimits:
        return ContentLimits(self.max_text_tokens, max_output_tokens=self.max_output_tokens)


@dataclass(frozen=True)
class BenchRun:
    """What one run measured: the trace's records, how its requests ended, the isolated runs and the
    SLOs they gave."""

    records: RequestRecords
    tally: Tally
    isolated: RequestRecords | None
    slo_s: dict[Modality, float]
    report: dict[str, Any]
    clock_origin_s: float = 0.0  # the records' time 0 on this machine's monotonic clock


def read_slo(path: Path) -> dict[Modality, float]:
    """TTFT SLO seconds per modality from a JSON object keyed by modality name."""
    try:
        raw = json.loads(path.read_text())
        return {m: float(raw[m.value]) for m in Modality}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"{path}: expected a JSON object of TTFT SLO seconds per modality "
            f'({{"text": 0.1, "image": 0.3, "video": 1.0}}): {error}'
        ) from None


def isolated_rows(trace: Trace, per_modality: int) -> np.ndarray:
    """The first `per_modality` rows of each modality present in `trace`."""
    rows = [np.flatnonzero(trace.modality == m.index)[:per_modality] for m in Modality]
    return np.sort(np.concatenate(rows))


def slo_from_isolated(isolated: RequestRecords) -> dict[Modality, float]:
    """Per modality, the P99 TTFT of its isolated runs (NaN for a modality that had none)."""
    slo = {}
    for modality in Modality:
        ttft = isolated.ttft[isolated.modality == modality.index]
        slo[modality] = float(np.percentile(ttft, SLO_PERCENTILE)) if ttft.size else float("nan")
    return slo


def subset_trace(trace: Trace, rows: np.ndarray) -> Trace:
    """The requests of `trace` at `rows`, all arriving at 0 (for one-at-a-time runs)."""
    return Trace(
        arrival_s=np.zeros(len(rows)),
        kind=trace.kind[rows],
        prompt_tokens=trace.prompt_tokens[rows],
        modality_tokens=trace.modality_tokens[rows],
        output_tokens=trace.output_tokens[rows],
    )


def run_bench(config: BenchConfig) -> BenchRun:
    """Warm up, take the SLOs, replay the trace and summarize it (see the module docstring)."""
    served = RequestFormat.of_model(config.model)
    trace = config.workload.trace()
    warm_up(config.url, served, config.seed + WARM_UP_SEED_OFFSET, config.ensemble)
    isolated = None
    if config.slo is not None:
        slo = read_slo(config.slo)
    else:
        if config.isolated < 1:
            raise ValueError("need --slo FILE or at least one isolated request per modality")
        subset = subset_trace(trace, isolated_rows(trace, config.isolated))
        logger.info("%d isolated requests for the SLOs", len(subset))
        isolated = one_at_a_time(
            config.url,
            subset,
            build_requests(subset, served, config.limits, config.seed + ISOLATED_SEED_OFFSET),
            config.ensemble,
        )
        slo = slo_from_isolated(isolated)
    requests = build_requests(trace, served, config.limits, config.seed)
    drain_s = config.drain_s
    if drain_s is None:
        drain_s = drain_allowance_s(requests, None if isolated is None else _isolated_e2e(isolated, trace))
    logger.info(
        "replaying %d requests over %.1f s (lost if unanswered %.0f s after the last is sent)",
        len(trace),
        float(trace.arrival_s[-1]),
        drain_s,
    )
    before = None if config.metrics_url is None else scrape(config.metrics_url)
    with GpuSampler() as gpu:
        replayed = replay(
            config.url, trace, requests, drain_s=drain_s, progress=config.progress, model=config.ensemble
        )
    report = bench_report(config, replayed.records, isolated, slo, gpu.result().to_json())
    result = report["results"][config.label]
    result.update(requests=asdict(replayed.tally), error_examples=replayed.errors[:5])
    if config.metrics_url is not None and before is not None:
        result["stages"] = stage_breakdown(before, scrape(config.metrics_url), config.engine)
    return BenchRun(replayed.records, replayed.tally, isolated, slo, report, replayed.clock_origin_s)


def _isolated_e2e(isolated: RequestRecords, trace: Trace) -> np.ndarray:
    """Per request of `trace`, the mean end-to-end time of its modality's isolated runs."""
    by_modality = {
        m.index: float(np.nanmean(isolated.e2e[isolated.modality == m.index]))
        if (isolated.modality == m.index).any()
        else float(np.nanmax(isolated.e2e))
        for m in Modality
    }
    return np.array([by_modality[int(m)] for m in trace.modality])


def bench_report(
    config: BenchConfig,
    records: RequestRecords,
    isolated: RequestRecords | None,
    slo: dict[Modality, float],
    gpu: dict[str, Any],
) -> dict[str, Any]:
    """`rps-serve simulate`'s JSON shape for one measured run, keyed by `config.label`."""
    makespan = records.makespan_s
    settings: dict[str, Any] = {
        k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items() if k != "workload"
    }
    settings.update(config.workload.to_json())
    settings["isolated_p99_ttft_s"] = {m.value: v for m, v in slo.items()}
    if isolated is not None:
        settings["isolated_runs"] = {
            m.value: {
                "ttft_s": isolated.ttft[isolated.modality == m.index].tolist(),
                "tpot_s": isolated.tpot[isolated.modality == m.index].tolist(),
            }
            for m in Modality
        }
    result = {
        **grouped_metrics(records),
        "utilization": gpu["utilization"],
        "gpu": gpu,
        "completed": int(records.completed.sum()),
        "makespan_s": makespan,
        "slo": slo_metrics(records, slo, makespan),
    }
    return {"config": settings, "results": {config.label: result}}
