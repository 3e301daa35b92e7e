"""The demo, and the policy comparison through Triton: the same mixed workloads through the local
Triton server under each policy, measured so that policies can be told apart on a small, noisy machine.

The method:
- placement: the engine's worker on a core of its own, everything else (tritonserver, the stubs,
  vLLM's EngineCore, this load client) on the others (`loadtest.placement`), as a GPU is its own
  device; every run records which process ran where and the CPU seconds it used;
- load: open-loop Poisson at fractions of the open-loop capacity, the highest rate at which FCFS's
  backlog stays bounded, bracketed by a probe where it grew (`loadtest.capacity`); where no probe
  found it growing, the loads are fractions of a lower bound, and say so;
- evidence: `repeats` seeds, fixed before the first run (`run_plan`, written to `plan.json`), each
  a trace every policy replays (paired) holding the mix's proportions and the rate exactly
  (stratified); each seed's policies run back to back, in the reverse order of the seed before
  (`run_order`), so that a drift of the machine lands on no policy more than another; every run is
  kept: none is added, repeated or dropped after its outcome is seen; only the steady state counts
  (arrivals between the first and last 10%); every ratio carries a 95% interval over seeds
  (`rps_serve.comparison`); every run's machine speed is recorded beside it, and acted on nowhere;
- where time goes: each server writes a run log (`triton.run_log`): per engine step, the loop's lag,
  and each request's stages, summarized over the steady window (`loadtest.run_analysis`).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rps_serve.client import Tally
from rps_serve.comparison import HEADLINE_METRICS, Ratio, ratio_rows, steady
from rps_serve.cost.runtime import REPORT_FILE, aging_time_scale
from rps_serve.cost.training import fit_of_report
from rps_serve.loadtest.capacity import (
    Capacity,
    OpenLoopCapacity,
    measure_capacity,
    request_stream,
    search_open_loop_capacity,
)
from rps_serve.loadtest.load import BenchConfig, BenchRun, run_bench
from rps_serve.loadtest.placement import Placement, process_usage, usage_during
from rps_serve.loadtest.replay import Replayed, build_requests, replay
from rps_serve.loadtest.run_analysis import STAGES, TOKEN_PARTS, pooled, summarize
from rps_serve.loadtest.server_stats import ServedFit, scrape
from rps_serve.local.server import Endpoints, local_server
from rps_serve.metrics import RequestRecords, concatenate_records, grouped_metrics
from rps_serve.requests import Modality, RequestClass
from rps_serve.scheduling.parameters import PressureSettings, class_ladder, in_time_units
from rps_serve.scheduling.regulator import starvation_bound_s
from rps_serve.triton.settings import (
    ENGINE_ARGS_ENV,
    FRONT_END_ENV,
    MODEL_ENV,
    POLICY_ENV,
    RUN_LOG_ENV,
    SETTINGS_FILE,
    read_settings,
)
from rps_serve.vllm_plugin.config import CONFIG_KEY, RPSConfig
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from rps_serve.workload.content import ContentLimits
from rps_serve.workload.request_format import RequestFormat
from rps_serve.workload.source import SyntheticWorkload

logger = logging.getLogger(__name__)

# Short answers keep the demo to a few minutes on two cores. Texts keep up to 4,500 of the trace's
# tokens, a whole document; the filler words take about 1.5 of the tiny model's tokens each, not the
# 1.1 the content plan assumes, so that is some 6,100 tokens, within the 8,192-token context.
DEMO_MAX_OUTPUT_TOKENS = 32
DEMO_CONTENT = ContentLimits(max_text_tokens=4500, max_output_tokens=DEMO_MAX_OUTPUT_TOKENS)
CAPACITY_SEED_OFFSET = 104729  # calibration content shares nothing with the replays' (no cache hits)
CANDIDATE = "rps"
# What RPS is to achieve against each baseline, per mix (the candidate's metric over the baseline's at
# most this); a target is met only where the ratio's whole 95% interval is.
TARGETS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "mixed-iii": (
        ("fcfs", "text P90 TTFT", 0.75),
        ("fcfs", "TPOT mean", 1.0),
        ("modality-priority", "sand P90 TTFT", 0.9),
    ),
    "cost-vs-modality": (
        ("modality-priority", "short-text P90 TTFT", 0.6),
        ("vllm-priority", "short-text P90 TTFT", 0.8),
        ("modality-priority", "normalized latency mean", 0.85),
    ),
}
# Paired runs whose machine speed (`run_speed`) differs by more than this are named (and nothing
# else): the same runs of one policy on this machine scatter by about 6% in it.
SPEED_TOLERANCE = 0.15


@dataclass(frozen=True)
class DemoConfig:
    """`rates` (requests per second) replace the open-loop capacity times `load_fractions`.
    `front_end` ("class" or "vllm") puts every policy on that front end (an ablation); None leaves each
    its own. `engine_args` (JSON) override model.json's for every server (e.g. a KV cache too small
    for the backlog: `{"num_gpu_blocks_override": 600}`). `pin` places the engine's worker on a core
    of its own (where there are two or more).
    `reuse_servers` keeps a server for the next run where the same policy runs next (`run_order`);
    otherwise every run starts a fresh one."""

    repository: Path
    model: Path
    out: Path
    policies: Sequence[str] = ("fcfs", "vllm-priority", "rps")
    mix: str = "mixed-iii"
    rates: Sequence[float] = ()
    load_fractions: Sequence[float] = (0.8,)
    repeats: int = 3
    calibrate_s: float = 30.0
    probes: int = 3
    probe_s: float = 45.0
    requests: int = 150
    seed: int = 0
    front_end: str | None = None
    engine_args: str = ""
    pin: bool = True
    reuse_servers: bool = False


@dataclass(frozen=True)
class PolicyRun:
    """One run: the load client's measurement, the server's run log over its steady window, and the
    CPU each process used."""

    bench: BenchRun
    analysis: dict[str, Any]
    processes: list[dict[str, Any]]
    fit: ServedFit | None  # the online cost model at the run's end; None where it is off


def run_speed(run: PolicyRun) -> float:
    """The machine's speed in a run: its median step that decodes one request and nothing else
    (`run_analysis.engine_summary`), the same work under every policy; NaN where it had too few such
    steps to measure it (`run_analysis.MIN_LONE_DECODE_STEPS`)."""
    return float(run.analysis["engine"].get("lone_decode_step_ms", math.nan))


def speed_change(candidate: PolicyRun, baseline: PolicyRun) -> float:
    """How much slower (> 0) or faster (< 0) the candidate's run found the machine than the baseline's."""
    return run_speed(candidate) / run_speed(baseline) - 1


@dataclass
class LoadRuns:
    """Every policy's runs at one arrival rate (`fraction` of the open-loop capacity, if measured;
    `bracketed` False where the capacity is only a lower bound), in seed order."""

    rate: float
    fraction: float | None
    runs: dict[str, list[PolicyRun]] = field(default_factory=dict)
    bracketed: bool = True

    @property
    def name(self) -> str:
        if self.fraction is None:
            return f"{self.rate:.2f} req/s"
        of = "" if self.bracketed else " of a lower bound on the capacity"
        return f"{self.rate:.2f} req/s ({self.fraction:g}x{of})"

    def steady_records(self) -> dict[str, list[RequestRecords]]:
        """Per policy, each seed's run cut to its steady window."""
        return {p: steady([r.bench.records for r in runs]) for p, runs in self.runs.items()}

    def pooled_records(self) -> dict[str, RequestRecords]:
        return {p: concatenate_records(runs) for p, runs in self.steady_records().items()}

    def tallies(self) -> dict[str, Tally]:
        return {p: Tally.total([r.bench.tally for r in runs]) for p, runs in self.runs.items()}

    def analysis(self) -> dict[str, dict[str, Any]]:
        return {p: pooled([r.analysis for r in runs]) for p, runs in self.runs.items()}

    @functools.cached_property
    def ratios(self) -> dict[str, dict[str, Ratio]]:
        """The candidate's paired ratios to each baseline over the whole runs (computed once: read it
        only when every run is in)."""
        records = {p: [r.bench.records for r in runs] for p, runs in self.runs.items()}
        return ratio_rows(records, CANDIDATE) if CANDIDATE in records and len(records) > 1 else {}


@dataclass(frozen=True)
class DemoRuns:
    loads: list[LoadRuns]
    placement: Placement | None
    closed_loop: Capacity | None  # the measurements the rates came from, if measured
    open_loop: OpenLoopCapacity | None

    def tallies(self) -> list[Tally]:
        return [t for load in self.loads for t in load.tallies().values()]


def run_plan(config: DemoConfig) -> list[str]:
    """What the runs will be, fixed before the first: seeds, requests, policies, their order and the
    rule that no run is added, repeated or dropped after its outcome is seen."""
    order = run_order(config.policies, range(config.repeats), config.reuse_servers)
    shown = "; ".join(f"{policy} {'+'.join(str(s) for s in seeds)}" for policy, seeds in order)
    loads = ", ".join(f"{r:g} req/s" for r in config.rates) or ", ".join(
        f"{f:g}x capacity" for f in config.load_fractions
    )
    last = config.seed + config.repeats - 1
    return [
        f"plan, fixed before the first run: {config.repeats} seeds ({config.seed}..{last}) x "
        f"{len(config.policies)} policies ({', '.join(config.policies)}) at {loads}, "
        f"{config.requests} requests a run",
        f"servers in order (policy seeds): {shown}",
        "every run is kept and reported: none is added, repeated or dropped after its outcome is seen",
    ]


def run_demo(config: DemoConfig, progress: Callable[[str], None] = logger.info) -> DemoRuns:
    """Write the plan, place the processes, find the capacity unless rates are given, then at each
    load every seed's trace under every policy in `run_order`; `progress` hears of each step."""
    if config.repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {config.repeats}")
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "runs").mkdir(exist_ok=True)
    plan = run_plan(config)
    (config.out / "plan.json").write_text(
        json.dumps({"plan": plan, "config": _settings(config)}, indent=1) + "\n"
    )
    for line in plan:
        progress(line)
    workdir = config.out.resolve() / "server"
    workdir.mkdir(exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    placement = Placement.split() if config.pin else None
    if placement is not None:
        placement.pin_this_process()
        progress(placement.describe())
    loads = [LoadRuns(rate, None) for rate in config.rates]
    closed = opened = None
    if not loads:
        closed, opened = _find_capacity(config, placement, progress)
        loads = [LoadRuns(f * opened.rate, f, bracketed=opened.bracketed) for f in config.load_fractions]
    total, counter = len(loads) * config.repeats * len(config.policies), itertools.count(1)

    def run_started(line: str) -> None:
        progress(f"[{next(counter)}/{total}] {line}")

    for load in loads:
        runs: dict[str, dict[int, PolicyRun]] = {}
        for policy, seeds in run_order(config.policies, range(config.repeats), config.reuse_servers):
            name = f"{policy}-{load.rate:.2f}-" + "-".join(str(s + 1) for s in seeds)
            done = _runs_on_one_server(config, placement, policy, name, load.rate, seeds, run_started)
            runs.setdefault(policy, {}).update(zip(seeds, done, strict=True))
        load.runs = {policy: [by_seed[s] for s in range(config.repeats)] for policy, by_seed in runs.items()}
    return DemoRuns(loads, placement, closed, opened)


def run_order(
    policies: Sequence[str], seeds: Sequence[int], reuse_servers: bool
) -> list[tuple[str, list[int]]]:
    """The servers in the order they run, each with the seeds it replays. Seed by seed, each seed's
    policies back to back, in the reverse order of the seed before (fcfs rps, rps fcfs, fcfs rps...):
    a drift of the machine during a seed favours no policy over the seeds. With `reuse_servers`, a
    server runs on into the next seed where its policy ends one seed and starts the next."""
    order: list[tuple[str, list[int]]] = []
    for index, seed in enumerate(seeds):
        for policy in policies if index % 2 == 0 else reversed(policies):
            if reuse_servers and order and order[-1][0] == policy:
                order[-1][1].append(seed)
            else:
                order.append((policy, [seed]))
    return order


def _runs_on_one_server(
    config: DemoConfig,
    placement: Placement | None,
    policy: str,
    name: str,
    rate: float,
    repeats: list[int],
    run_started: Callable[[str], None],
) -> list[PolicyRun]:
    """`repeats`' traces under `policy`, one after another (each drained before the next: `run_bench`
    waits for every answer) on one fresh server."""
    run_log = config.out.resolve() / "runs" / f"{name}.jsonl"
    run_log.unlink(missing_ok=True)
    runs = []
    with _server(config, placement, policy, name, run_log) as endpoints:
        for repeat in repeats:
            run_started(f"{policy}, seed {config.seed + repeat}: {config.requests} requests at {rate:.2f}/s")
            before = process_usage(endpoints.pid)
            bench = run_bench(_bench_config(config, endpoints, policy, rate, config.seed + repeat))
            processes = usage_during(before, process_usage(endpoints.pid))
            fit = ServedFit.of(scrape(endpoints.metrics_url))
            (window,) = steady([bench.records])
            origin = bench.clock_origin_s
            start, end = origin + window.arrival_s.min(), origin + window.arrival_s.max()
            runs.append(PolicyRun(bench, summarize(run_log, start, end, window, origin), processes, fit))
    return runs


def server_environment(
    config: DemoConfig, placement: Placement | None, policy: str, run_log: Path | None = None
) -> dict[str, str]:
    """The settings a run's server starts with (`triton.settings`' environment overrides)."""
    env = {MODEL_ENV: str(config.model.resolve()), POLICY_ENV: policy}
    if placement is not None:
        env.update(placement.environment())
    if config.front_end is not None:
        env[FRONT_END_ENV] = config.front_end
    if config.engine_args:
        env[ENGINE_ARGS_ENV] = config.engine_args
    if run_log is not None:
        env[RUN_LOG_ENV] = str(run_log)
    return env


def _server(
    config: DemoConfig, placement: Placement | None, policy: str, run_name: str, run_log: Path | None = None
) -> AbstractContextManager[Endpoints]:
    env = server_environment(config, placement, policy, run_log)
    log = config.out.resolve() / f"tritonserver-{run_name}.log"
    logger.info("%s: starting tritonserver (log %s)", run_name, log)
    return local_server(config.repository, config.out.resolve() / "server", env=env, log_file=log)


def _bench_config(
    config: DemoConfig, endpoints: Endpoints, policy: str, rate: float, seed: int
) -> BenchConfig:
    return BenchConfig(
        url=endpoints.grpc_url,
        model=config.model,
        workload=SyntheticWorkload(config.mix, rate, config.requests, seed, stratified=True),
        seed=seed,
        label=policy,
        max_text_tokens=DEMO_CONTENT.max_text_tokens,
        max_output_tokens=DEMO_MAX_OUTPUT_TOKENS,
        isolated=1,
        progress=False,
        metrics_url=endpoints.metrics_url,
    )


def _find_capacity(
    config: DemoConfig, placement: Placement | None, progress: Callable[[str], None]
) -> tuple[Capacity, OpenLoopCapacity]:
    """On one FCFS server: the closed-loop rate, then the open-loop capacity bracketed from it."""
    seed = config.seed + CAPACITY_SEED_OFFSET
    served = RequestFormat.of_model(config.model)
    probes = iter(range(1, config.probes + 1))

    def probe(rate: float) -> Replayed:
        n = next(probes)
        requests = max(20, round(rate * config.probe_s))
        progress(f"capacity probe {n}/{config.probes}: {requests} requests at {rate:.2f}/s (open loop)")
        workload = SyntheticWorkload(config.mix, rate, requests, seed + n, stratified=True)
        trace = workload.trace()
        return replay(endpoints.grpc_url, trace, build_requests(trace, served, DEMO_CONTENT, seed + n))

    with _server(config, placement, "fcfs", "capacity") as endpoints:
        stream = request_stream(config.mix, served, seed, content_seed=seed, limits=DEMO_CONTENT)
        progress(f"capacity: {config.calibrate_s:g} s closed loop, then {config.probes} open-loop probes")
        closed = measure_capacity(endpoints.grpc_url, stream, config.calibrate_s)
        if closed.rate <= 0:
            raise RuntimeError(f"the server completed no request in {config.calibrate_s:g} s")
        opened = search_open_loop_capacity(probe, ceiling=closed.rate, probes=config.probes)
    return closed, opened


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
    (`loadtest.stages`, from the server's per-class metrics)."""
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


def ratio_table(ratios: dict[str, dict[str, Ratio]], candidate: str = CANDIDATE) -> str:
    """Each headline metric (a row), `candidate` over each baseline (a column) with its 95% interval
    over n seeds, "=" where the interval includes 1 (no difference measured); then why a ratio was not
    measured, and the first metric's ratio in each seed alone."""
    if not ratios:
        return ""
    names = [m.name for m in HEADLINE_METRICS]
    width = 30
    lines = [f"{candidate + ' / baseline (95% CI)':<22}" + "".join(f" {b:>{width}}" for b in ratios)]
    for name in names:
        cells = [_ratio_cell(by_metric[name]) for by_metric in ratios.values()]
        lines.append(f"{name:<22}" + "".join(f" {c:>{width}}" for c in cells))
    first = next(iter(ratios.values()))[names[0]]
    lines.append(
        f"(steady state, n = {first.seeds} paired seeds, {first.requests} {candidate} requests; "
        "the interval over seeds; = : no difference measured, the interval includes 1)"
    )
    refusals = {
        f"{name}: {ratio.refused}"
        for by_metric in ratios.values()
        for name, ratio in by_metric.items()
        if ratio.refused
    }
    lines += [f"not measured, {reason}" for reason in sorted(refusals)]
    for baseline, by_metric in ratios.items():
        seeds = ", ".join(f"{r:.2f}x" for r in by_metric[names[0]].per_seed)
        lines.append(f"{candidate} / {baseline} {names[0]}, each seed alone: {seeds}")
    return "\n".join(lines)


def target_lines(load: LoadRuns, repository: Path, mix: str) -> list[str]:
    """Each of `mix`'s `TARGETS` whose baseline ran, met, not met or not measured by its interval, and
    the candidate's longest video waits against the starvation bound (`starvation_check`)."""
    ratios, lines = load.ratios, []
    for baseline, metric, target in TARGETS.get(mix, ()):
        if baseline in ratios:
            ratio = ratios[baseline][metric]
            verdict = "" if not ratio.measured else " met" if ratio.meets(target) else " not met"
            lines.append(f"target {CANDIDATE} / {baseline} {metric} <= {target:g}x: {ratio}{verdict}")
    lines += wait_lines(load, repository)
    return lines


def wait_lines(load: LoadRuns, repository: Path) -> list[str]:
    """Each policy's longest video wait for its first token in every run (whole runs: the drain too),
    and the candidate's against the starvation bound of its run (`starvation_check`): a bound holds
    only if every run is within it."""
    if CANDIDATE not in load.runs:
        return []
    scale = aging_time_scale(repository)
    rps = read_settings(repository / SETTINGS_FILE, repository).rps
    hold_s = RPSConfig.from_additional_config({CONFIG_KEY: rps}).decode_hold_s * scale
    lines = []
    for policy, runs in load.runs.items():
        videos = [r.bench.records.ttft[r.bench.records.modality == Modality.VIDEO.index] for r in runs]
        longest = ", ".join(_seconds(float(np.nanmax(v)) if np.isfinite(v).any() else None) for v in videos)
        lines.append(f"{policy}: longest video TTFT per run (s): {longest}")
    checks = [starvation_check(run.bench.records, scale, hold_s) for run in load.runs[CANDIDATE]]
    for label in sorted({label for check in checks for label in check}):
        per_run = [check[label] for check in checks if label in check]
        over = sum(c["longest_video_ttft_s"] > c["bound_s"] for c in per_run)
        shown = "; ".join(f"{c['longest_video_ttft_s']:.2f} s of {c['bound_s']:.1f} s" for c in per_run)
        verdict = "every run within it" if not over else f"{over} of {len(per_run)} runs over it"
        lines.append(
            f"{CANDIDATE} {label} videos against the starvation bound, per run: {shown} ({verdict}; "
            f"aging clock {scale:.2f}x the paper's; decode hold {hold_s:.2f} s)"
        )
    return lines


def fit_lines(load: LoadRuns, repository: Path) -> list[str]:
    """The cost model each policy served, and how the online refit moved it where it ran (the stock
    baselines observe nothing: they serve the repository's fit as it is)."""
    report = json.loads((repository / REPORT_FILE).read_text())
    trained, _ = fit_of_report(report)
    lines = [
        f"cost model: the repository's, trained on {report['source']} ({report['records']} records); "
        f"aging clock {aging_time_scale(repository):.2f}x the paper's"
    ]
    for policy, runs in load.runs.items():
        fits = [run.fit for run in runs if run.fit is not None]
        if not fits:
            continue
        last = fits[-1]
        moved = ", ".join(
            f"{m.value} {trained[m].slope * 1e3:.3g} -> {last.lines[m].slope * 1e3:.3g} ms/token"
            for m in Modality
        )
        lines.append(
            f"{policy}: refitted online, {sum(f.updates for f in fits)} updates over {len(fits)} server(s) "
            f"from {sum(f.observed for f in fits)} observed prefills, boundaries moved "
            f"{sum(f.boundary_updates for f in fits)} times; at the last run's end: {moved}"
        )
    if len(lines) == 1:
        lines.append("online refit off (model.json cost_model_online): every run served that fit unchanged")
    return lines


def starvation_check(
    records: RequestRecords, time_scale: float, hold_s: float = 0.0
) -> dict[str, dict[str, float]]:
    """Per heavier class with videos: their longest TTFT, against the starvation bound for sand that
    waited no longer than the longest sand TTFT of the same runs (`starvation_bound_s` at the highest
    boost, on the served model's clock) plus the longest decode hold (`hold_s`, once per request). An
    infinite bound says sand itself waited past the reach of aging: below capacity it should not."""
    ladder = in_time_units(class_ladder(records.num_levels), time_scale)
    sand = records.ttft[records.level == 0]
    longest_sand = float(np.nanmax(sand)) if np.isfinite(sand).any() else 0.0
    checks = {}
    for level in range(1, records.num_levels):
        videos = records.ttft[(records.level == level) & (records.modality == Modality.VIDEO.index)]
        if not np.isfinite(videos).any():
            continue
        bound = starvation_bound_s(ladder, level, longest_sand, PressureSettings().max_boost) + hold_s
        checks[RequestClass.for_level(level, records.num_levels).label] = {
            "longest_video_ttft_s": float(np.nanmax(videos)),
            "bound_s": bound,
            "longest_sand_ttft_s": longest_sand,
        }
    return checks


def _ratio_cell(ratio: Ratio) -> str:
    """A table cell: the reasons a ratio was not measured are listed below the table."""
    return ratio.marked() if ratio.measured else "not measured"


def engine_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy, over the steady windows: the engine's steps and the `vllm_model` loop's lag."""
    columns = (
        ("busy", "busy", "{:.0%}"),
        ("step_ms_mean", "step ms", "{:.1f}"),
        ("step_ms_per_decode", "step/decode ms", "{:.1f}"),
        ("decode_step_ms", "decode-only ms", "{:.1f}"),
        ("lone_decode_step_ms", "lone decode ms", "{:.2f}"),
        ("mixed_step_ms", "with-prefill ms", "{:.1f}"),
        ("prefill_share", "prefill steps", "{:.0%}"),
        ("running", "running", "{:.1f}"),
        ("waiting", "waiting", "{:.1f}"),
        ("preemptions", "preempted", "{:.0f}"),
    )
    header = f"{'engine, steady state':<22}" + "".join(f" {title:>15}" for _, title, _ in columns)
    lines = [header + f" {'loop lag P99 ms':>15}"]
    for policy, summary in analysis.items():
        engine, lag = summary["engine"], summary["loop_lag_s"]
        cells = [_format(fmt, engine.get(key)) for key, _, fmt in columns]
        cells.append(_format("{:.1f}", None if "p99" not in lag else 1000 * lag["p99"]))
        lines.append(f"{policy:<22}" + "".join(f" {c:>15}" for c in cells))
    return "\n".join(lines)


def machine_speed_lines(load: LoadRuns, tolerance: float = SPEED_TOLERANCE) -> list[str]:
    """Each run's machine speed (`run_speed`), then every seed whose candidate and baseline runs
    differ in it by more than `tolerance`: there the machine's speed moved between the two runs, and
    that seed's ratios measure the machine as well as the policies (said, not acted on)."""
    speeds = {policy: [run_speed(run) for run in runs] for policy, runs in load.runs.items()}
    lines = [
        "machine speed, the median step decoding one request alone (ms), per seed: "
        + "; ".join(
            f"{policy} {', '.join(_format('{:.2f}', v) for v in values)}" for policy, values in speeds.items()
        )
    ]
    if CANDIDATE not in load.runs:
        return lines
    for baseline, runs in load.runs.items():
        if baseline == CANDIDATE:
            continue
        for seed, (mine, theirs) in enumerate(zip(load.runs[CANDIDATE], runs, strict=True)):
            change = speed_change(mine, theirs)
            if abs(change) > tolerance:
                lines.append(
                    f"seed {seed}: {CANDIDATE}'s run found the machine {abs(change):.0%} "
                    f"{'slower' if change > 0 else 'faster'} than {baseline}'s ({run_speed(mine):.2f} ms "
                    f"against {run_speed(theirs):.2f}): this seed's ratios to {baseline} measure the "
                    "machine as well"
                )
    return lines


def run_stage_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy and class, mean seconds of each stage to the first token (from the run logs): vLLM's
    own input processing is front-end work for every policy alike."""
    titles = ("front queue", "front work", "vllm input", "engine queue", "prefill", "to 1st token")
    columns = [(key, _seconds) for key in (*STAGES, "to_first_token_s")]
    return _class_table(analysis, "stages", "stages (s)", titles, columns)


def token_parts_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy and class, the mean time per output token and the steps it was spent in (from the
    run logs, `run_analysis.token_parts`), and how many requests those steps decoded."""
    titles = ("TPOT", "encoder", "prefill", "decode", "between", "decoding")
    ms = functools.partial(_format, "{:.1f}")
    columns = [(key, ms) for key in ("tpot_ms", *TOKEN_PARTS, "decoding")]
    return _class_table(analysis, "token_parts", "per output token (ms)", titles, columns)


def _class_table(
    analysis: dict[str, dict[str, Any]],
    key: str,
    heading: str,
    titles: Sequence[str],
    columns: Sequence[tuple[str, Callable[[float | None], str]]],
) -> str:
    """A row per policy and class of `analysis[policy][key]`, in class order."""
    lines = [f"{heading:<24} {'n':>5}" + "".join(f" {t:>12}" for t in titles)]
    for policy, summary in analysis.items():
        for label, row in sorted(
            summary[key].items(), key=lambda item: RequestClass.from_label(item[0]).value
        ):
            cells = [show(row[name]) for name, show in columns]
            lines.append(
                f"{policy + ' ' + label:<24} {int(row['requests']):>5}" + "".join(f" {c:>12}" for c in cells)
            )
    return "\n".join(lines)


def process_table(runs: dict[str, list[PolicyRun]]) -> str:
    """Per policy, each process's role, the cores it ran on and its CPU seconds (its first run)."""
    lines = []
    for policy, policy_runs in runs.items():
        shown = ", ".join(f"{p['role']} [{p['cores']}] {p['cpu_s']:.0f} s" for p in policy_runs[0].processes)
        lines.append(f"{policy}: {shown}")
    return "\n".join(lines)


def _settings(config: DemoConfig) -> dict[str, Any]:
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    settings.update(policies=list(config.policies), rates=list(config.rates))
    settings["load_fractions"] = list(config.load_fractions)
    return settings


def results_json(demo: DemoRuns, config: DemoConfig) -> dict[str, Any]:
    """The plan and configuration, the placement and capacity measurements and, per load, each
    policy's pooled steady-state results, runs, run-log analysis and processes, and the candidate's
    ratios."""
    loads = []
    for load in demo.loads:
        tallies, analysis = load.tallies(), load.analysis()
        results = {
            policy: {
                **grouped_metrics(records),
                "completed": int(records.completed.sum()),
                "runs": [_run_summary(run) for run in load.runs[policy]],
                "requests": asdict(tallies[policy]),
                "analysis": analysis[policy],
            }
            for policy, records in load.pooled_records().items()
        }
        loads.append(
            {
                "rate": load.rate,
                "fraction": load.fraction,
                "capacity_bracketed": load.bracketed,
                "results": results,
                f"{CANDIDATE}_ratios": {
                    baseline: {name: r.to_json() for name, r in row.items()}
                    for baseline, row in load.ratios.items()
                },
                "targets": target_lines(load, config.repository, config.mix),
                "machine_speed": machine_speed_lines(load),
                "cost_model": fit_lines(load, config.repository),
            }
        )
    return {
        "plan": run_plan(config),
        "config": _settings(config),
        "placement": None if demo.placement is None else asdict(demo.placement),
        "closed_loop": None if demo.closed_loop is None else asdict(demo.closed_loop),
        "open_loop": None
        if demo.open_loop is None
        else {**asdict(demo.open_loop), "described": demo.open_loop.describe()},
        "loads": loads,
    }


def save_results(demo: DemoRuns, config: DemoConfig) -> list[Path]:
    """`demo.json` (`results_json`), the claims' record `claims.json` (`loadtest.claims`) and one TTFT
    CDF plot per load; returns the paths written."""
    from rps_serve.loadtest.claims import claim_record, write_record
    from rps_serve.plots import plot_ttft_cdf

    json_path = config.out / "demo.json"
    summary = results_json(demo, config)
    json_path.write_text(json.dumps(summary, indent=1) + "\n")
    claims_path = config.out / "claims.json"
    write_record(claim_record(summary, CANDIDATE), claims_path)
    written = [json_path, claims_path]
    for load in demo.loads:
        plot_path = config.out / f"ttft-{load.rate:.2f}.png"
        title = f"tiny Qwen2-VL on CPU via Triton, {config.mix} at {load.name}, steady state"
        plot_ttft_cdf(load.pooled_records(), plot_path, title)
        written.append(plot_path)
    return written


def _run_summary(run: PolicyRun) -> dict[str, Any]:
    """One run's steady-state headline metrics, its engine summary and processes, to see how far runs
    of one policy scatter and why, and every request's record (`RequestRecords.from_json` reads them
    back, to compute any ratio again)."""
    (records,) = steady([run.bench.records])
    return {
        **{m.name: m.of(records) for m in HEADLINE_METRICS},
        "records": run.bench.records.to_json(),
        "engine": run.analysis["engine"],
        "loop_lag_s": run.analysis["loop_lag_s"],
        "token_parts": run.analysis["token_parts"],
        "run_log": run.analysis["run_log"],
        "steady_window_monotonic_s": run.analysis["window"],
        "processes": run.processes,
        "served_fit": None if run.fit is None else run.fit.as_json(),
    }


def _format(fmt: str, value: float | None) -> str:
    return "-" if value is None or value != value else fmt.format(value)


def _seconds(value: float | None) -> str:
    return _format("{:.3f}", value)
