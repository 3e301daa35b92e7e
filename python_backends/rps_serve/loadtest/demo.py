"""The demo, and the policy comparison through Triton: the same mixed workload through the local Triton
server under stock vLLM's FCFS, stock vLLM's priority policy with our classes (`vllm-priority`) and
RPS, each run on a freshly started server, then TTFT per modality side by side and a CDF plot.

Unless rates are given, a server of the first policy is first loaded closed-loop to measure what this
machine sustains (`loadtest.capacity`), and every policy replays at each of `load_fractions` of that: a
fixed rate would overload a slow or busy machine (refusals, a backlog that never drains) and leave a
fast one idle. With `repeats` > 1 the policies run interleaved (fcfs, vllm-priority, rps, fcfs, ...),
each repeat on its own trace and content, and each policy's runs at one load are pooled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rps_serve.loadtest.capacity import Capacity, measure_capacity, request_stream
from rps_serve.loadtest.load import BenchConfig, BenchRun, run_bench
from rps_serve.loadtest.stages import pooled_stages
from rps_serve.metrics import RequestRecords, concatenate_records, grouped_metrics
from rps_serve.requests import Modality
from rps_serve.tiny_model import TinyModelSpec
from rps_serve.triton.client import Tally
from rps_serve.triton.server import Endpoints, local_server
from rps_serve.triton.settings import MODEL_ENV, POLICY_ENV
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from rps_serve.workload.content import ContentLimits
from rps_serve.workload.source import SyntheticWorkload

logger = logging.getLogger(__name__)

# Short answers keep the demo to a few minutes on two cores.
DEMO_MAX_OUTPUT_TOKENS = 32
DEMO_CONTENT = ContentLimits(max_text_tokens=4096, max_output_tokens=DEMO_MAX_OUTPUT_TOKENS)
CAPACITY_SEED_OFFSET = 104729  # calibration content shares nothing with the replays' (no cache hits)
# The metrics the targets are stated in, read from a result in `rps-serve simulate`'s JSON shape.
HEADLINE: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "text P90 TTFT": lambda r: r["by_modality"]["text"]["ttft"]["p90"],
    "text mean TTFT": lambda r: r["by_modality"]["text"]["ttft"]["mean"],
    "video mean TTFT": lambda r: r["by_modality"]["video"]["ttft"]["mean"],
    "TPOT mean": lambda r: r["overall"]["tpot"]["mean"],
}


@dataclass(frozen=True)
class DemoConfig:
    """`rates` (requests per second) replace the measured capacity times `load_fractions`."""

    repository: Path
    model: Path
    out: Path
    policies: Sequence[str] = ("fcfs", "vllm-priority", "rps")
    mix: str = "mixed-iii"
    rates: Sequence[float] = ()
    load_fractions: Sequence[float] = (0.7,)
    repeats: int = 1
    calibrate_s: float = 60.0
    requests: int = 120
    seed: int = 0


@dataclass
class LoadRuns:
    """Every policy's runs at one arrival rate (`fraction` of the measured capacity, if measured)."""

    rate: float
    fraction: float | None
    runs: dict[str, list[BenchRun]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.rate:.2f} req/s" + ("" if self.fraction is None else f" ({self.fraction:g}x)")

    def records(self) -> dict[str, RequestRecords]:
        """Each policy's runs pooled."""
        return {p: concatenate_records([r.records for r in runs]) for p, runs in self.runs.items()}

    def tallies(self) -> dict[str, Tally]:
        return {p: Tally.total([r.tally for r in runs]) for p, runs in self.runs.items()}

    def stages(self) -> dict[str, dict[str, Any]]:
        """Per policy, where each class waited on the server, pooled over its runs."""
        stages = {}
        for policy, runs in self.runs.items():
            results = [run.report["results"][policy] for run in runs]
            stages[policy] = pooled_stages([r["stages"] for r in results if "stages" in r])
        return stages


@dataclass(frozen=True)
class DemoRuns:
    loads: list[LoadRuns]
    capacity: Capacity | None  # the measurement the rates came from, if it was measured

    def tallies(self) -> list[Tally]:
        return [t for load in self.loads for t in load.tallies().values()]


def run_demo(config: DemoConfig) -> DemoRuns:
    """`rps-serve bench` once per policy, load and repeat, each against a freshly started server
    (empty caches); at each load the policies take turns, and each repeat replays its own trace."""
    if config.repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {config.repeats}")
    config.out.mkdir(parents=True, exist_ok=True)
    workdir = config.out.resolve() / "server"
    workdir.mkdir(exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    loads = [LoadRuns(rate, None) for rate in config.rates]
    capacity = None
    if not loads:
        with _server(config, config.policies[0], "capacity") as endpoints:
            capacity = _measure_capacity(endpoints.grpc_url, config)
        if capacity.rate <= 0:
            raise RuntimeError(f"the server completed no request in {config.calibrate_s:g} s")
        loads = [LoadRuns(fraction * capacity.rate, fraction) for fraction in config.load_fractions]
    for load in loads:
        for repeat in range(config.repeats):
            for policy in config.policies:
                run_name = f"{policy}-{load.rate:.2f}-{repeat + 1}"
                with _server(config, policy, run_name) as endpoints:
                    logger.info("%s: replaying %d requests at %.2f/s", run_name, config.requests, load.rate)
                    run = run_bench(_bench_config(config, endpoints, policy, load.rate, config.seed + repeat))
                load.runs.setdefault(policy, []).append(run)
    return DemoRuns(loads, capacity)


def _server(config: DemoConfig, policy: str, run_name: str) -> AbstractContextManager[Endpoints]:
    env = {MODEL_ENV: str(config.model.resolve()), POLICY_ENV: policy}
    log = config.out.resolve() / f"tritonserver-{run_name}.log"
    logger.info("%s: starting tritonserver (log %s)", run_name, log)
    return local_server(config.repository, config.out.resolve() / "server", env=env, log_file=log)


def _bench_config(
    config: DemoConfig, endpoints: Endpoints, policy: str, rate: float, seed: int
) -> BenchConfig:
    return BenchConfig(
        url=endpoints.grpc_url,
        model=config.model,
        workload=SyntheticWorkload(config.mix, rate, config.requests, seed),
        seed=seed,
        label=policy,
        max_text_tokens=DEMO_CONTENT.max_text_tokens,
        max_output_tokens=DEMO_MAX_OUTPUT_TOKENS,
        progress=False,
        metrics_url=endpoints.metrics_url,
    )


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


def stage_table(stages: dict[str, dict[str, Any]]) -> str:
    """Per policy and class: mean seconds from arrival at vllm_model to the first token, and its parts
    (`loadtest.stages`)."""
    header = ("to 1st token", "front queue", "front work", "engine")
    widths = (12, 11, 10, 7)
    lines = [
        f"{'server-side (s)':<22} {'n':>4} "
        + " ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True))
    ]
    for policy, by_class in stages.items():
        for label, stage in by_class.items():
            if not stage["requests"]:
                continue
            cells = [
                stage[k] for k in ("to_first_token_s", "front_end_queue_s", "front_end_work_s", "engine_s")
            ]
            shown = " ".join(f"{_seconds(v):>{w}}" for v, w in zip(cells, widths, strict=True))
            lines.append(f"{policy + ' ' + label:<22} {int(stage['requests']):>4} {shown}")
    return "\n".join(lines)


def ratio_table(records: dict[str, RequestRecords], candidate: str) -> str:
    """`candidate` against every other policy: text P90 and mean TTFT, video mean TTFT and mean time per
    output token, as ratios (below 1: the candidate is faster)."""
    if candidate not in records:
        return ""
    reports = {p: grouped_metrics(r) for p, r in records.items()}
    lines = [f"{candidate + ' / baseline':<26}" + "".join(f" {name:>15}" for name in HEADLINE)]
    for baseline in records:
        if baseline == candidate:
            continue
        ratios = [_ratio(get(reports[candidate]), get(reports[baseline])) for get in HEADLINE.values()]
        lines.append(f"{candidate + ' / ' + baseline:<26}" + "".join(f" {r:>15}" for r in ratios))
    return "\n".join(lines)


def results_json(demo: DemoRuns, config: DemoConfig) -> dict[str, Any]:
    """The configuration, the capacity measurement and, per load, each policy's pooled results."""
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    settings.update(policies=list(config.policies), rates=list(config.rates))
    settings["load_fractions"] = list(config.load_fractions)
    loads = []
    for load in demo.loads:
        tallies, stages = load.tallies(), load.stages()
        results = {
            policy: {
                **grouped_metrics(records),
                "completed": int(records.completed.sum()),
                "runs": [_run_summary(run.report["results"][policy]) for run in load.runs[policy]],
                "requests": asdict(tallies[policy]),
                "stages": stages[policy],
            }
            for policy, records in load.records().items()
        }
        loads.append({"rate": load.rate, "fraction": load.fraction, "results": results})
    capacity = None if demo.capacity is None else asdict(demo.capacity)
    return {"config": settings, "capacity": capacity, "loads": loads}


def save_results(demo: DemoRuns, config: DemoConfig) -> list[Path]:
    """`demo.json` (`results_json`) and one TTFT CDF plot per load; returns the paths written."""
    from rps_serve.sim.plots import plot_ttft_cdf

    json_path = config.out / "demo.json"
    json_path.write_text(json.dumps(results_json(demo, config), indent=1) + "\n")
    written = [json_path]
    for load in demo.loads:
        plot_path = config.out / f"ttft-{load.rate:.2f}.png"
        title = f"tiny Qwen2-VL on CPU via Triton, {config.mix} at {load.name}"
        plot_ttft_cdf(load.records(), plot_path, title)
        written.append(plot_path)
    return written


def _run_summary(result: dict[str, Any]) -> dict[str, float | None]:
    """One run's headline metrics, to see how far runs of one policy scatter."""
    return {name: get(result) for name, get in HEADLINE.items()}


def _ratio(value: float | None, baseline: float | None) -> str:
    return "-" if value is None or not baseline else f"{value / baseline:.2f}x"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
