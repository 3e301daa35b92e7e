"""The demo's report: the lines printed under its tables (targets, the longest-wait guarantees, the
cost model served, the machine's speed) and the files it writes (`demo.json`, `claims.json`, TTFT plots)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.comparison import STOCK_WAIT_MARGIN, wait_checks
from rps_harness.loadtest.demo import DemoConfig, config_json, run_plan
from rps_harness.loadtest.demo_analysis import SPEED_TOLERANCE, TARGETS, candidate_of, starvation_check
from rps_harness.loadtest.demo_records import DemoRuns, LoadRuns, run_speed, speed_change
from rps_harness.loadtest.run_analysis import engine_run, read_run_log
from rps_harness.loadtest.tables import formatted, seconds
from rps_harness.metrics import grouped_metrics
from rps_harness.service_bound import class_bounds
from rps_harness.sim.simulator import served_settings
from rps_serve.cost.runtime import REPORT_FILE, aging_time_scale, cost_model_at
from rps_serve.cost.training import fit_of_report
from rps_serve.requests import Modality
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.scheduling.light_steps import wait_stretch
from rps_serve.scheduling.parameters import Order
from rps_serve.triton.settings import SETTINGS_FILE, read_settings
from rps_serve.vllm_plugin.config import CONFIG_KEY, RPSConfig


def target_lines(load: LoadRuns, repository: Path, mix: str) -> list[str]:
    """Each of `mix`'s `TARGETS` whose baseline ran, met, not met or not measured by its interval, and
    the candidate's longest video waits against the starvation bound (`starvation_check`)."""
    ratios, lines = load.ratios, []
    for baseline, metric, target in TARGETS.get(mix, ()):
        if baseline in ratios:
            ratio = ratios[baseline][metric]
            verdict = "" if not ratio.measured else " met" if ratio.meets(target) else " not met"
            lines.append(f"target {load.candidate} / {baseline} {metric} <= {target:g}x: {ratio}{verdict}")
    lines += wait_lines(load, repository)
    return lines


def wait_lines(load: LoadRuns, repository: Path) -> list[str]:
    """Each policy's longest video wait for its first token in every run (whole runs: the drain too),
    and the candidate's guarantee: under an aging clock (rps), its heavier classes' videos against the
    starvation bound of their run (`starvation_check`); without one, each class's longest wait against
    the better stock priority's on the same seed (`comparison.wait_checks`). Holds only if every run
    is within it."""
    if load.candidate not in load.runs:
        return []
    lines = []
    for policy, runs in load.runs.items():
        videos = [r.bench.records.ttft[r.bench.records.modality == Modality.VIDEO.index] for r in runs]
        longest = ", ".join(seconds(float(np.nanmax(v)) if np.isfinite(v).any() else None) for v in videos)
        lines.append(f"{policy}: longest video TTFT per run (s): {longest}")
    scale = aging_time_scale(repository)
    settings = read_settings(repository / SETTINGS_FILE, repository)
    candidate, served = served_settings(load.candidate)
    rps = RPSConfig.from_additional_config(
        {CONFIG_KEY: {**settings.rps, **served, "policy": candidate.value}}
    )
    hold_s = rps.decode_hold_s * scale
    if candidate.row.order is Order.STATIC_AND_AGING:
        return lines + _starvation_bound_lines(load, scale, hold_s)
    token_budget = int(settings.engine_args.get("max_num_batched_tokens", 0))
    light_budget = 0
    if rps.light_steps and token_budget > 0:
        # From the classes the plug-in serves: the repository's cost model within the step's edges.
        classes = engine_classes(cost_model_at(repository), token_budget)
        light_budget = rps.variant.light_budget(token_budget, classes)
    stock = _stock_wait_lines(load, hold_s, wait_stretch(token_budget, light_budget))
    return lines + stock + _service_bound_lines(load, token_budget, light_budget)


def _service_bound_lines(load: LoadRuns, token_budget: int, light_budget: int) -> list[str]:
    """The candidate's longest wait in the engine per class against the bound its light steps' floor
    buys from each run's own load (`service_bound`), over each run's steady window; none without light
    steps."""
    if not light_budget:
        return []
    per_class: dict[str, list[tuple[float, float]]] = {}
    for run in load.runs[load.candidate]:
        engine = engine_run(read_run_log(Path(run.analysis["run_log"])), token_budget, light_budget)
        start, end = run.analysis["window"]
        for bound in class_bounds(engine, (engine.queued_s >= start) & (engine.queued_s <= end)):
            per_class.setdefault(bound.label, []).append((bound.longest_s, bound.bound_s))
    share = f"{light_budget} of {token_budget} tokens a step"
    return [
        f"{load.candidate} longest {label} wait in the engine against the bound its floor ({share}) "
        f"buys from the run's load, per run: {_within_bounds(per_run)})"
        for label, per_run in per_class.items()
    ]


def _starvation_bound_lines(load: LoadRuns, scale: float, hold_s: float) -> list[str]:
    lines = []
    checks = [starvation_check(run.bench.records, scale, hold_s) for run in load.runs[load.candidate]]
    for label in sorted({label for check in checks for label in check}):
        per_run = [(c[label]["longest_video_ttft_s"], c[label]["bound_s"]) for c in checks if label in c]
        lines.append(
            f"{load.candidate} {label} videos against the starvation bound, per run: "
            f"{_within_bounds(per_run, '.1f')}; aging clock {scale:.2f}x the paper's; decode hold "
            f"{hold_s:.2f} s)"
        )
    return lines


def _within_bounds(per_run: Sequence[tuple[float, float]], bound_format: str = ".2f") -> str:
    """Each run's (longest wait, its bound) as "W s of B s", then how many runs went over, its closing
    parenthesis left to the caller."""
    over = sum(value > bound for value, bound in per_run)
    shown = "; ".join(f"{value:.2f} s of {bound:{bound_format}} s" for value, bound in per_run)
    return f"{shown} ({'every run within it' if not over else f'{over} of {len(per_run)} runs over it'}"


def _stock_wait_lines(load: LoadRuns, hold_s: float, stretch: float) -> list[str]:
    stock = {
        policy: [run.bench.records for run in runs]
        for policy, runs in load.runs.items()
        if served_settings(policy)[0].is_stock_priority
    }
    if not stock:
        return [f"{load.candidate}: no stock priority ran beside it, so its longest waits are not checked"]
    checks = wait_checks([run.bench.records for run in load.runs[load.candidate]], stock, hold_s, stretch)
    lines = []
    for label in dict.fromkeys(c.label for c in checks):
        per_run = [(c.policy_s, c.bound_s) for c in checks if c.label == label]
        margin = STOCK_WAIT_MARGIN * max(c.stretch for c in checks if c.label == label)
        lines.append(
            f"{load.candidate} longest {label} TTFT against {margin:.3g}x the better of "
            f"{', '.join(stock)} plus its decode hold ({hold_s:.2f} s), per run: {_within_bounds(per_run)})"
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


def machine_speed_lines(load: LoadRuns, tolerance: float = SPEED_TOLERANCE) -> list[str]:
    """Each run's machine speed (`run_speed`), then every seed whose candidate and baseline runs
    differ in it by more than `tolerance`: there the machine's speed moved between the two runs, and
    that seed's ratios measure the machine as well as the policies (said, not acted on)."""
    speeds = {policy: [run_speed(run) for run in runs] for policy, runs in load.runs.items()}
    lines = [
        "machine speed, the median step decoding one request alone (ms), per seed: "
        + "; ".join(
            f"{policy} {', '.join(formatted('{:.2f}', v) for v in values)}"
            for policy, values in speeds.items()
        )
    ]
    if load.candidate not in load.runs:
        return lines
    for baseline, runs in load.runs.items():
        if baseline == load.candidate:
            continue
        for seed, (mine, theirs) in enumerate(zip(load.runs[load.candidate], runs, strict=True)):
            change = speed_change(mine, theirs)
            if abs(change) > tolerance:
                lines.append(
                    f"seed {seed}: {load.candidate}'s run found the machine {abs(change):.0%} "
                    f"{'slower' if change > 0 else 'faster'} than {baseline}'s ({run_speed(mine):.2f} ms "
                    f"against {run_speed(theirs):.2f}): this seed's ratios to {baseline} measure the "
                    "machine as well"
                )
    return lines


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
                "runs": [run.summary(load.warm_up) for run in load.runs[policy]],
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
                f"{load.candidate}_ratios": {
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
        "config": config_json(config),
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
    from rps_harness.loadtest.claims import claim_record, write_record
    from rps_harness.plots import plot_ttft_cdf

    json_path = config.out / "demo.json"
    summary = results_json(demo, config)
    json_path.write_text(json.dumps(summary, indent=1) + "\n")
    claims_path = config.out / "claims.json"
    write_record(claim_record(summary, candidate_of(config.policies)), claims_path)
    written = [json_path, claims_path]
    for load in demo.loads:
        plot_path = config.out / f"ttft-{load.rate:.2f}.png"
        title = f"tiny Qwen2-VL on CPU via Triton, {config.mix} at {load.name}, steady state"
        plot_ttft_cdf(load.pooled_records(), plot_path, title)
        written.append(plot_path)
    return written
