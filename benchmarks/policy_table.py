"""The policy table: every candidate scheduling policy beside the baselines a vLLM user would configure,
on every setting of `h100_comparison` (7B on 1 GPU, 72B on 4; mixes i-v and cost-vs-modality at 0.9x
of the capacity, the overload, KV pressure), in the simulator.

Run: `python benchmarks/policy_table.py [NAME ...] [--candidates P,P] [--requests N] [--out DIR]`
(`make policy-table`). Per setting, each policy's sand P90 TTFT, text P90 TTFT, mean normalized
latency and video mean TTFT (steady window, mean over the seeds), its longest TTFT (the whole run,
the longest over the seeds) and its preemptions; then each candidate over each stock priority
(`vllm-priority`, `modality-priority`) per metric: the geometric mean of the per-seed ratios with its
95% interval over seeds (`rps_harness.comparison.paired_ratio`), `=` where the interval includes 1.
The seeds are `h100_comparison.SEEDS`, fixed in code before any run; every run is reported.
Deterministic: the same commit prints the same table.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from h100_comparison import BASELINES, DEPLOYMENTS, SEEDS, SETTINGS, Comparison, _model, check_settings
from rps_harness.comparison import HEADLINE_METRICS, STOCK_PRIORITIES, Metric, paired_ratio, steady
from rps_harness.metrics import RequestRecords
from rps_harness.sim.simulator import policy_variant

CANDIDATES = ("rps", "rps-no-evict", "headroom", "headroom-cost")
METRICS: tuple[Metric, ...] = tuple(
    m
    for name in ("sand P90 TTFT", "text P90 TTFT", "normalized latency mean", "video mean TTFT")
    for m in HEADLINE_METRICS
    if m.name == name
)


def longest_ttft_s(records: RequestRecords) -> float:
    """The longest time any request of the whole run waited for its first token (NaN if none did)."""
    ttft = records.ttft[~np.isnan(records.ttft)]
    return float(ttft.max()) if ttft.size else float("nan")


def table(comparison: Comparison, names: Sequence[str], candidates: Sequence[str]) -> list[dict[str, object]]:
    """Print the table of every named setting on both deployments; returns what it printed, as JSON."""
    policies = (*BASELINES, *candidates)
    print(
        f"{len(SEEDS)} seeds ({', '.join(map(str, SEEDS))}), {comparison.requests} requests a run; metrics"
        " over the steady window, mean over seeds; longest TTFT over whole runs, longest over seeds.\n"
    )
    results = []
    for reference, gpus in DEPLOYMENTS:
        for name in names:
            setting = SETTINGS[name]
            capacity = comparison.capacity(reference, gpus, setting)
            runs, preemptions = comparison.runs(reference, gpus, setting, policies)
            print(f"### {_model(reference, gpus)}, {name}: {setting.describe(capacity.rate)}\n")
            print(
                "| policy | " + " | ".join(f"{m.name} (s)" for m in METRICS) + " | longest TTFT (s) |"
                " preemptions |\n|---|" + "---:|" * (len(METRICS) + 2)
            )
            absolute = {}
            for policy in policies:
                windows = steady(runs[policy])
                values = [float(np.mean([m.of(w) for w in windows])) for m in METRICS]
                longest = max(longest_ttft_s(r) for r in runs[policy])
                absolute[policy] = {
                    **dict(zip((m.name for m in METRICS), values, strict=True)),
                    "longest": longest,
                }
                cells = " | ".join(f"{v:.3g}" for v in values)
                print(f"| {policy} | {cells} | {longest:.3g} | {sum(preemptions[policy])} |")
            print(
                "\n| candidate / stock | "
                + " | ".join(m.name for m in METRICS)
                + " |\n|---|"
                + "---|" * len(METRICS)
            )
            ratios = {}
            for candidate in candidates:
                for stock in STOCK_PRIORITIES:
                    row = {m.name: paired_ratio(runs[candidate], runs[stock], m) for m in METRICS}
                    ratios[f"{candidate}/{stock}"] = {k: r.to_json() for k, r in row.items()}
                    print(f"| {candidate} / {stock} | " + " | ".join(r.marked() for r in row.values()) + " |")
            print()
            results.append(
                {
                    "reference": reference,
                    "gpus": gpus,
                    "setting": name,
                    "capacity": capacity.rate,
                    "absolute": absolute,
                    "preemptions": preemptions,
                    "ratios": ratios,
                }
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"settings: {', '.join(SETTINGS)}")
    parser.add_argument("--candidates", default=",".join(CANDIDATES), help="policies beside the baselines")
    parser.add_argument("--requests", type=int, default=3500)
    parser.add_argument("--out", type=Path, default=Path("out/policy-table"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    check_settings(parser, args.names)
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()]
    for candidate in candidates:
        policy_variant(candidate)  # fail on a bad name before any run
    results = table(Comparison(args.requests, args.out), args.names or list(SETTINGS), candidates)
    (args.out / "policy_table.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
