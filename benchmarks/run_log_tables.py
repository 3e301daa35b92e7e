"""Where a demo's time went, read again from its kept runs and their servers' run logs.

Run: `python benchmarks/run_log_tables.py OUT/runs [--baseline P]`.
Every run `rps-serve demo` keeps (`runs/POLICY-RATE-seedN.json`) names its server's run log and its
steady window; this summarizes each run's window as the demo does (`run_analysis.summarize`), pools
the runs of a policy and prints the demo's stage, first-token-step and slowest-first-token tables,
so that a demo recorded before a table existed can be read with it. Then, per policy, the steps of
its whole log: the median length of a full prompt chunk with and without a vision encoder beside
it, and the share of the busy time in steps over 0.4 s.

With `--baseline`, per seed, sand's P90 time to its first token (from the run log) over the
baseline's, as run and with every wait for a step taken out: not waiting for the step in progress,
not queued, and its own step replaced by its prefill alone (a line through the log's steps that
held one prefill and no encoder). The second is how far any order of admission could take sand on
this engine: it shortens no step.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.comparison import log_t_interval
from rps_harness.loadtest.demo import read_kept_runs
from rps_harness.loadtest.run_analysis import (
    in_window,
    pooled,
    read_run_log,
    step_in_progress_waits,
    summarize,
)
from rps_harness.loadtest.tables import first_token_step_table, first_token_tail_table, run_stage_table

FULL_CHUNK = 0.95  # of the largest prompt chunk a step carried: a full one
LONG_STEP_S = 0.4


def step_lengths(steps: Sequence[dict[str, Any]]) -> str:
    """Full prompt chunks with and without an encoder (median seconds, steps), and the busy time's
    share in long steps."""
    timed = [s for s in steps if "step_ms" in s]
    seconds = np.array([s["step_ms"] for s in timed]) / 1000
    tokens = np.array([s["prefill_tokens"] for s in timed])
    encoder = np.array([s["encoder_inputs"] > 0 for s in timed])
    full = tokens >= FULL_CHUNK * tokens.max(initial=0)
    parts = [
        f"full chunk {np.median(seconds[full & cut]):.3f} s ({int((full & cut).sum())} steps) {label}"
        for cut, label in ((encoder, "with an encoder"), (~encoder, "without"))
        if (full & cut).any()
    ]
    long = seconds > LONG_STEP_S
    busy = seconds[long].sum() / seconds.sum()
    share = f"steps over {LONG_STEP_S} s: {long.mean():.1%} of steps, {busy:.0%} of busy time"
    return "; ".join([*parts, share])


def lone_prefill_line(steps: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """Seconds of a step holding one prefill and no encoder, as a line in its prompt tokens (slope,
    intercept), through the log's steps that did."""
    lone = [s for s in steps if "step_ms" in s and s["prefill_requests"] == 1 and s["encoder_inputs"] == 0]
    slope, intercept = np.polyfit([s["prefill_tokens"] for s in lone], [s["step_ms"] / 1000 for s in lone], 1)
    return float(slope), float(intercept)


def sand_p90s(
    run: dict[str, Any],
    records: Sequence[dict[str, Any]],
    steps: Sequence[dict[str, Any]],
    line: tuple[float, float],
) -> tuple[float, float]:
    """Sand's P90 time to the first token in `run`'s window, as run and with every wait for a step
    taken out (the module's docstring); `steps`: the run log's, `line`: its `lone_prefill_line`."""
    slope, intercept = line
    start, end = run["steady_window_monotonic_s"]
    sand = [r for r in in_window(records, "request", start, end) if r["level"] == 0 and "prefill_s" in r]
    waits = np.nan_to_num(step_in_progress_waits(sand, steps))
    actual = np.array([r["to_first_token_s"] for r in sand])
    engine = np.array([r["engine_queue_s"] + r["prefill_s"] for r in sand])
    alone = slope * np.array([r["prompt_tokens"] for r in sand]) + intercept
    return float(np.percentile(actual, 90)), float(np.percentile(actual - waits - engine + alone, 90))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path, help="a demo's runs/ folder")
    parser.add_argument("--baseline", help="a policy of the demo: sand's P90 over its, per seed")
    args = parser.parse_args()
    runs = read_kept_runs(args.runs)
    logs = {
        policy: read_run_log(Path(next(iter(seeds.values()))["run_log"])) for policy, seeds in runs.items()
    }
    steps = {policy: [r for r in records if r["kind"] == "step"] for policy, records in logs.items()}
    analysis = {}
    for policy, seeds in runs.items():
        summaries = []
        for run in seeds.values():
            start, end = run["steady_window_monotonic_s"]
            summaries.append(summarize(Path(run["run_log"]), start, end))
        analysis[policy] = pooled(summaries)
    print(run_stage_table(analysis))
    print(first_token_step_table(analysis))
    print(first_token_tail_table(analysis))
    for policy, policy_steps in steps.items():
        print(f"{policy}: " + step_lengths(policy_steps))
    if args.baseline is None:
        return
    lines = {policy: lone_prefill_line(policy_steps) for policy, policy_steps in steps.items()}
    p90s = {
        policy: {
            seed: sand_p90s(run, logs[policy], steps[policy], lines[policy]) for seed, run in seeds.items()
        }
        for policy, seeds in runs.items()
    }
    base = p90s[args.baseline]
    for policy, mine in p90s.items():
        if policy == args.baseline:
            continue
        both = sorted(set(mine) & set(base))
        for label, kind in (("as run", 0), ("no step waits", 1)):
            ratios = [mine[seed][kind] / base[seed][0] for seed in both]
            estimate, low, high = log_t_interval(ratios)
            name = f"{policy}/{args.baseline} sand P90 {label}"
            print(f"{name}: {estimate:.2f}x [{low:.2f}, {high:.2f}] n={len(both)}")


if __name__ == "__main__":
    main()
