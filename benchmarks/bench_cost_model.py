"""Latency of the ONNX cost model (Impact Estimator + Request Classifier) under onnxruntime.

Trains the default reference model into a temporary repository, then times `cost` + `classify`
(the two ONNX sessions, as Triton's ensemble runs them) and `assess` (plus Python result objects)
for batches of 1 and 256 requests. Run: `python -m benchmarks.bench_cost_model`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.timing import median_seconds
from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.cost import features as cols
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.reference import DEFAULT_REFERENCE
from rps_serve.requests import Modality, RequestFeatures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp)
        train_cost_model(reference_profile(DEFAULT_REFERENCE), repository, TrainingOptions(), "bench")
        model = OnnxCostModel.from_repository(repository)
        print(f"{'batch':>6} {'onnx us':>9} {'us/req':>8} {'assess us':>10}")
        for batch in (1, 256):
            requests = [
                RequestFeatures(Modality.from_index(int(m)), int(t))
                for m, t in zip(rng.integers(0, 3, batch), rng.integers(10, 20_000, batch), strict=True)
            ]
            matrix = cols.feature_matrix(requests)
            onnx_us = 1e6 * median_seconds(lambda m=matrix: model.classify(model.cost(m)), args.repeats)
            assess_us = 1e6 * median_seconds(lambda r=requests: model.assess(r), args.repeats)
            print(f"{batch:6d} {onnx_us:9.1f} {onnx_us / batch:8.2f} {assess_us:10.1f}")


if __name__ == "__main__":
    main()
