"""How each published H100 reference fit classes the served model's requests, against the cost model
the repository was trained with (a profile of the served model): the share of requests both put in the
same class, for the profile's own requests and for a grid of prompt lengths per modality.

    .venv/bin/python benchmarks/reference_agreement.py --repository model_repository \
        --profile build/profile/tiny-qwen2-vl.jsonl
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rps_harness.sim.online import probe_grid
from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.cost.model import agreement
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.records import read_records
from rps_serve.profiles.reference import reference_model_names

PER_KIND = 500  # records per request kind, as `rps-serve train --reference` synthesizes them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, required=True, help="trained on the served model")
    parser.add_argument("--profile", type=Path, required=True, help="the profile it was trained on")
    args = parser.parse_args()
    served = OnnxCostModel.from_repository(args.repository)
    profiled = [r.features for r in read_records(args.profile)]
    print(f"{'reference':28} {'profile requests':>16} {'token grid':>10}")
    for name in reference_model_names():
        with tempfile.TemporaryDirectory() as out:
            records = reference_profile(name, per_kind=PER_KIND, seed=0)
            train_cost_model(records, Path(out), TrainingOptions(), source=name)
            reference = OnnxCostModel.from_repository(Path(out))
            print(
                f"{name:28} {agreement(served, reference, profiled):>16.1%} "
                f"{agreement(served, reference, probe_grid()):>10.1%}"
            )


if __name__ == "__main__":
    main()
