"""The FCFS-vs-RPS demo: the same mixed workload through the local Triton server, once per policy,
each on a freshly started server, then TTFT per modality side by side and a CDF plot."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rps_serve.bench.load import BenchConfig, BenchRun, run_bench
from rps_serve.metrics import RequestRecords, grouped_metrics
from rps_serve.requests import Modality
from rps_serve.triton.server import local_server
from rps_serve.triton.settings import MODEL_ENV, POLICY_ENV
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

logger = logging.getLogger(__name__)

# Short answers keep the demo to a few minutes on two cores.
DEMO_MAX_OUTPUT_TOKENS = 32


@dataclass(frozen=True)
class DemoConfig:
    repository: Path
    model: Path
    out: Path
    policies: Sequence[str] = ("fcfs", "rps")
    mix: str = "mixed-iii"
    rate: float = 2.0
    requests: int = 120
    seed: int = 0


def run_demo(config: DemoConfig) -> dict[str, BenchRun]:
    """`rps-serve bench` once per policy, each against a freshly started server (empty caches)."""
    config.out.mkdir(parents=True, exist_ok=True)
    workdir = config.out.resolve() / "server"
    workdir.mkdir(exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    runs = {}
    for policy in config.policies:
        env = {MODEL_ENV: str(config.model.resolve()), POLICY_ENV: policy}
        log = config.out.resolve() / f"tritonserver-{policy}.log"
        logger.info("%s: starting tritonserver (log %s)", policy, log)
        with local_server(config.repository, workdir, env=env, log_file=log) as endpoints:
            logger.info("%s: replaying %d requests at %.1f/s", policy, config.requests, config.rate)
            runs[policy] = run_bench(
                BenchConfig(
                    url=endpoints.grpc_url,
                    model=config.model,
                    mix=config.mix,
                    rate=config.rate,
                    requests=config.requests,
                    seed=config.seed,
                    label=policy,
                    max_output_tokens=DEMO_MAX_OUTPUT_TOKENS,
                    progress=False,
                )
            )
    return runs


def ttft_table(records: dict[str, RequestRecords]) -> str:
    """Per modality: count, then mean and P90 TTFT (seconds) of each policy."""
    policies = list(records)
    header = f"{'TTFT (s)':<10} {'n':>4}" + "".join(f" {p + ' mean':>10} {p + ' P90':>9}" for p in policies)
    lines = [header]
    reports = {p: grouped_metrics(r) for p, r in records.items()}
    first = records[policies[0]]
    for modality in Modality:
        count = int((first.modality == modality.index).sum())
        cells = []
        for policy in policies:
            ttft = reports[policy]["by_modality"][modality.value]["ttft"]
            cells.append(f" {_seconds(ttft['mean']):>10} {_seconds(ttft['p90']):>9}")
        lines.append(f"{modality.value:<10} {count:>4}" + "".join(cells))
    done = ", ".join(f"{p} {int(r.completed.sum())}/{len(r.ttft)}" for p, r in records.items())
    lines.append(f"completed: {done}")
    return "\n".join(lines)


def save_results(runs: dict[str, BenchRun], config: DemoConfig) -> tuple[Path, Path]:
    from rps_serve.sim.plots import plot_ttft_cdf

    report: dict[str, Any] = {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in config.__dict__.items()},
        "results": {p: run.report["results"][p] for p, run in runs.items()},
    }
    report["config"]["policies"] = list(config.policies)
    json_path, plot_path = config.out / "demo.json", config.out / "ttft.png"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    title = f"tiny Qwen2-VL on CPU via Triton, {config.mix} at {config.rate:g} req/s"
    plot_ttft_cdf({p: run.records for p, run in runs.items()}, plot_path, title)
    return json_path, plot_path


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
