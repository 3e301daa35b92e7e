"""A demo's verdict from the runs it kept, for a demo that ended before its report.

Run: `python benchmarks/kept_runs.py OUT/runs --candidate P [--mix MIX] [--hold-s S] [--stretch X]`.
`rps-serve demo` writes each run as it ends (`runs/POLICY-RATE-seedN.json`, `PolicyRun.summary`), so
an engine that dies in the last runs leaves every finished run on disk but no report. This reads them
and judges them as the demo would have: the candidate's ratio to each baseline per headline metric,
over the seeds both ran (`comparison.paired_ratio`, from the demo's warm-up), `=` where the interval
holds 1; the mix's targets (`demo_analysis.TARGETS`); and each class's longest wait against the better
stock priority's (`comparison.wait_checks`, the candidate's decode hold `--hold-s` in seconds and light
steps' `--stretch`). A seed missing for a policy is named; nothing else is left out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rps_harness.comparison import HEADLINE_METRICS, STOCK_PRIORITIES, paired_ratio, wait_checks
from rps_harness.loadtest.demo import read_kept_runs
from rps_harness.loadtest.demo_analysis import TARGETS
from rps_harness.metrics import RequestRecords

WARM_UP = 0.3  # the demo's (`make demo`: --warm-up 0.3)


def kept_runs(folder: Path) -> dict[str, dict[int, RequestRecords]]:
    """Every kept run's records, by policy and seed."""
    return {
        policy: {seed: RequestRecords.from_json(run["records"]) for seed, run in seeds.items()}
        for policy, seeds in read_kept_runs(folder).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path, help="a demo's runs/ folder")
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--mix", help="the demo's mix, for its targets")
    parser.add_argument("--hold-s", type=float, default=0.0, help="the candidate's decode hold, seconds")
    parser.add_argument("--stretch", type=float, default=1.0, help="its light steps' wait stretch")
    args = parser.parse_args()
    runs = kept_runs(args.runs)
    print("seeds kept:", {policy: sorted(seeds) for policy, seeds in runs.items()})
    mine = runs[args.candidate]
    ratios = {}
    for baseline, theirs in runs.items():
        if baseline == args.candidate:
            continue
        seeds = sorted(set(mine) & set(theirs))
        ratios[baseline] = {
            m.name: paired_ratio([mine[s] for s in seeds], [theirs[s] for s in seeds], m, warm_up=WARM_UP)
            for m in HEADLINE_METRICS
        }
        print(f"\n{args.candidate} / {baseline}, seeds {seeds}:")
        for name, ratio in ratios[baseline].items():
            print(f"  {name}: {ratio.marked()}")
    for baseline, metric, target in TARGETS.get(args.mix or "", ()):
        ratio = ratios[baseline][metric]
        verdict = "" if not ratio.measured else " met" if ratio.meets(target) else " not met"
        print(f"target {args.candidate} / {baseline} {metric} <= {target:g}x: {ratio}{verdict}")
    seeds = sorted(set(mine).intersection(*(set(runs[s]) for s in STOCK_PRIORITIES if s in runs)))
    stock = {s: [runs[s][seed] for seed in seeds] for s in STOCK_PRIORITIES if s in runs}
    checks = wait_checks([mine[seed] for seed in seeds], stock, args.hold_s, args.stretch)
    broken = [c for c in checks if not c.holds]
    held = len(checks) - len(broken)
    print(f"\nlongest wait per run and class within its bound, seeds {seeds}: {held} of {len(checks)}")
    for c in broken:
        print(f"- over: seed {seeds[c.run]}, {c.label}: {c.policy_s:.3g} s against {c.bound_s:.3g} s")


if __name__ == "__main__":
    main()
