"""Observed prefill costs under load against the cost model fitted on isolated runs.

Serves the demo's mixed workload through `rps_ensemble` under RPS (`rps-serve demo --policies rps`
at `--rate`, one server) with the plug-in recording what every prefill took (`observed_costs`,
`cost.observed`), then compares, per modality, each request's observed admission seconds with what
the repository's Impact Estimator predicts for it: the median ratio and its spread, and the median
absolute error. Under load a prefill shares its steps with others' decodes and chunks, so the ratio
says how far the isolated fit is from what the engine spends on a request while it serves.

`python benchmarks/observed_costs.py --rate 2.3 --out out/observed-costs` (about 3 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from rps_harness.local.checkout import REPOSITORY
from rps_serve.cost import features as cols
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.profiles.records import ProfileRecord, read_records
from rps_serve.requests import Modality


def compare(records: list[ProfileRecord], model: OnnxCostModel) -> dict[str, dict[str, float]]:
    """Per modality: requests, median and 10th/90th percentile of observed over predicted seconds,
    and the median absolute error in seconds."""
    predicted = model.cost(cols.feature_matrix([r.features for r in records]))[:, cols.PREFILL_S]
    observed = np.array([r.admission_s for r in records])
    modality = np.array([r.modality.index for r in records])
    rows = {}
    for m in Modality:
        mine = modality == m.index
        if not mine.any():
            continue
        ratio = observed[mine] / predicted[mine]
        rows[m.value] = {
            "requests": int(mine.sum()),
            "ratio_median": float(np.median(ratio)),
            "ratio_p10": float(np.percentile(ratio, 10)),
            "ratio_p90": float(np.percentile(ratio, 90)),
            "abs_error_median_s": float(np.median(np.abs(observed[mine] - predicted[mine]))),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--rate", type=float, required=True, help="arrival rate, requests per second")
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--out", type=Path, default=Path("out/observed-costs"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    observed = (args.out / "observed.jsonl").resolve()
    observed.unlink(missing_ok=True)
    env = {**os.environ, "RPS_SCHEDULER": json.dumps({"observed_costs": str(observed)})}
    demo = [str(Path(sys.executable).parent / "rps-serve"), "demo", "--repository", str(args.repository)]
    subprocess.run(
        [
            *demo,
            "--policies",
            "rps",
            "--rate",
            str(args.rate),
            "--repeats",
            "1",
            "--requests",
            str(args.requests),
            "--reuse-servers",
            "--out",
            str(args.out / "demo"),
        ],
        env=env,
        check=True,
    )
    rows = compare(list(read_records(observed)), OnnxCostModel.from_repository(args.repository))
    (args.out / "observed_costs.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"{'modality':<8} {'n':>4} {'observed/predicted median [p10, p90]':>38} {'|error| median ms':>18}")
    for name, row in rows.items():
        spread = f"{row['ratio_median']:.2f} [{row['ratio_p10']:.2f}, {row['ratio_p90']:.2f}]"
        print(f"{name:<8} {row['requests']:>4} {spread:>38} {row['abs_error_median_s'] * 1000:>18.1f}")


if __name__ == "__main__":
    main()
