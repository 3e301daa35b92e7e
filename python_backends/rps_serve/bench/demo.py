"""The demo: the same mixed workload through the local Triton server under stock vLLM's FCFS, stock
vLLM's priority policy with our classes (`vllm-priority`) and RPS, each on a freshly started server,
then TTFT per modality side by side and a CDF plot.

Unless a rate is given, the first policy's server is first loaded closed-loop to measure what this
machine sustains (`bench.capacity`), and every policy replays at `load_fraction` of that: a fixed rate
would overload a slow or busy machine (refusals, a backlog that never drains) and leave a fast one idle.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_serve.bench.capacity import Capacity, measure_capacity, request_stream
from rps_serve.bench.load import BenchConfig, BenchRun, run_bench
from rps_serve.metrics import RequestRecords, grouped_metrics
from rps_serve.requests import Modality
from rps_serve.tiny_model import TinyModelSpec
from rps_serve.triton.server import local_server
from rps_serve.triton.settings import MODEL_ENV, POLICY_ENV
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from rps_serve.workload.content import ContentLimits

logger = logging.getLogger(__name__)

# Short answers keep the demo to a few minutes on two cores.
DEMO_MAX_OUTPUT_TOKENS = 32
DEMO_CONTENT = ContentLimits(max_text_tokens=4096, max_output_tokens=DEMO_MAX_OUTPUT_TOKENS)
CAPACITY_SEED_OFFSET = 104729  # calibration content shares nothing with the replays' (no cache hits)


@dataclass(frozen=True)
class DemoConfig:
    repository: Path
    model: Path
    out: Path
    policies: Sequence[str] = ("fcfs", "vllm-priority", "rps")
    mix: str = "mixed-iii"
    rate: float | None = None  # requests per second; None: `load_fraction` of the measured capacity
    load_fraction: float = 0.7
    calibrate_s: float = 60.0
    requests: int = 120
    seed: int = 0


@dataclass(frozen=True)
class DemoRuns:
    runs: dict[str, BenchRun]
    rate: float
    capacity: Capacity | None  # the measurement the rate came from, if it was measured


def run_demo(config: DemoConfig) -> DemoRuns:
    """`rps-serve bench` once per policy, each against a freshly started server (empty caches)."""
    config.out.mkdir(parents=True, exist_ok=True)
    workdir = config.out.resolve() / "server"
    workdir.mkdir(exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    runs = {}
    rate, capacity = config.rate, None
    for policy in config.policies:
        env = {MODEL_ENV: str(config.model.resolve()), POLICY_ENV: policy}
        log = config.out.resolve() / f"tritonserver-{policy}.log"
        logger.info("%s: starting tritonserver (log %s)", policy, log)
        with local_server(config.repository, workdir, env=env, log_file=log) as endpoints:
            if rate is None:
                capacity = _measure_capacity(endpoints.grpc_url, config)
                rate = config.load_fraction * capacity.rate
                if rate <= 0:
                    raise RuntimeError(
                        f"the server completed no request in {config.calibrate_s:g} s; see {log}"
                    )
            logger.info("%s: replaying %d requests at %.2f/s", policy, config.requests, rate)
            runs[policy] = run_bench(
                BenchConfig(
                    url=endpoints.grpc_url,
                    model=config.model,
                    mix=config.mix,
                    rate=rate,
                    requests=config.requests,
                    seed=config.seed,
                    label=policy,
                    max_text_tokens=DEMO_CONTENT.max_text_tokens,
                    max_output_tokens=DEMO_MAX_OUTPUT_TOKENS,
                    progress=False,
                    metrics_url=endpoints.metrics_url,
                )
            )
    assert rate is not None  # set by the first policy's run
    return DemoRuns(runs, rate, capacity)


def _measure_capacity(url: str, config: DemoConfig) -> Capacity:
    seed = config.seed + CAPACITY_SEED_OFFSET
    requests = request_stream(
        config.mix, TinyModelSpec.load(config.model), seed, content_seed=seed, limits=DEMO_CONTENT
    )
    logger.info("measuring the sustained rate for %.0f s", config.calibrate_s)
    return measure_capacity(url, requests, config.calibrate_s)


def ttft_table(records: dict[str, RequestRecords]) -> str:
    """Per modality: count, then mean and P90 TTFT (seconds) of each policy."""
    policies = list(records)
    widths = {p: (max(10, len(p) + 5), max(9, len(p) + 4)) for p in policies}
    header = f"{'TTFT (s)':<10} {'n':>4}" + "".join(
        f" {p + ' mean':>{widths[p][0]}} {p + ' P90':>{widths[p][1]}}" for p in policies
    )
    lines = [header]
    reports = {p: grouped_metrics(r) for p, r in records.items()}
    first = records[policies[0]]
    for modality in Modality:
        count = int((first.modality == modality.index).sum())
        cells = []
        for policy in policies:
            ttft = reports[policy]["by_modality"][modality.value]["ttft"]
            mean_width, p90_width = widths[policy]
            cells.append(f" {_seconds(ttft['mean']):>{mean_width}} {_seconds(ttft['p90']):>{p90_width}}")
        lines.append(f"{modality.value:<10} {count:>4}" + "".join(cells))
    done = ", ".join(f"{p} {int(r.completed.sum())}/{len(r.ttft)}" for p, r in records.items())
    lines.append(f"completed: {done}")
    return "\n".join(lines)


def stage_table(reports: dict[str, dict[str, Any]]) -> str:
    """Per policy and class: mean seconds from arrival at vllm_model to the first token, and its parts
    (`bench.stages`), from each run's results."""
    header = ("to 1st token", "front queue", "front work", "engine")
    widths = (12, 11, 10, 7)
    lines = [
        f"{'server-side (s)':<22} {'n':>4} "
        + " ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True))
    ]
    for policy, result in reports.items():
        for label, stages in result.get("stages", {}).items():
            if not stages["requests"]:
                continue
            cells = [
                stages[k] for k in ("to_first_token_s", "front_end_queue_s", "front_end_work_s", "engine_s")
            ]
            shown = " ".join(f"{_seconds(v):>{w}}" for v, w in zip(cells, widths, strict=True))
            lines.append(f"{policy + ' ' + label:<22} {int(stages['requests']):>4} {shown}")
    return "\n".join(lines)


def save_results(demo: DemoRuns, config: DemoConfig) -> tuple[Path, Path]:
    from rps_serve.sim.plots import plot_ttft_cdf

    report: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "rate": demo.rate,
        "capacity": None if demo.capacity is None else asdict(demo.capacity),
        "results": {p: run.report["results"][p] for p, run in demo.runs.items()},
    }
    report["config"]["policies"] = list(config.policies)
    json_path, plot_path = config.out / "demo.json", config.out / "ttft.png"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    title = f"tiny Qwen2-VL on CPU via Triton, {config.mix} at {demo.rate:.2f} req/s"
    plot_ttft_cdf({p: run.records for p, run in demo.runs.items()}, plot_path, title)
    return json_path, plot_path


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
