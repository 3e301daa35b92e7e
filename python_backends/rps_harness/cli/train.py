"""`rps-serve train`: fit the Impact Estimator and Request Classifier, export them to ONNX."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.cost.classifier import MAX_CLASSES, MIN_CLASSES, MemoryFeature
from rps_serve.cost.runtime import REPORT_FILE, profile_source
from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.records import read_records
from rps_serve.profiles.reference import DEFAULT_REFERENCE, reference_model_names


def add_reference_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """`--reference NAME`: a published reference model."""
    parser.add_argument(
        "--reference",
        default=DEFAULT_REFERENCE,
        choices=reference_model_names(),
        metavar="NAME",
        help=f"{help}: one of {', '.join(reference_model_names())}",
    )


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "train", help="fit the Impact Estimator and Request Classifier, export them to ONNX"
    )
    add_reference_argument(parser, "reference profile used when --profile-data is not given")
    parser.add_argument(
        "--profile-data", type=Path, metavar="FILE", help="JSONL profile records (rps-serve profile)"
    )
    parser.add_argument(
        "--out", type=Path, metavar="DIR", required=True, help="model repository to write into"
    )
    parser.add_argument(
        "--classes", type=int, default=3, choices=range(MIN_CLASSES, MAX_CLASSES + 1), help="k of k-means"
    )
    parser.add_argument("--power-transform", action="store_true", help="Yeo-Johnson before scaling")
    parser.add_argument(
        "--memory-feature",
        default=MemoryFeature.PREFILL_TOKENS.value,
        choices=[m.value for m in MemoryFeature],
        help="memory coordinate of the classifier",
    )
    parser.add_argument("--per-kind", type=int, default=500, help="records per request kind (reference)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.profile_data:
        records = list(read_records(args.profile_data))
        source = profile_source(args.profile_data)
    else:
        records = reference_profile(args.reference, per_kind=args.per_kind, seed=args.seed)
        source = f"reference profile {args.reference} (published H100 fits, synthesized records)"
    options = TrainingOptions(
        num_classes=args.classes,
        power_transform=args.power_transform,
        memory_feature=MemoryFeature(args.memory_feature),
        seed=args.seed,
    )
    report = train_cost_model(records, args.out, options, source)
    print(f"trained on {report['records']} records from {source}")
    for modality, mae in report["estimator"]["mae_s"].items():
        print(f"  prefill MAE {modality:<5} {mae * 1000:8.2f} ms")
    for entry in report["classifier"]["classes"]:
        by_modality = ", ".join(f"{m} {n}" for m, n in entry["count_by_modality"].items())
        print(f"  class {entry['level']} {entry['name']:<7} {entry['count']:6d} records ({by_modality})")
    print(f"wrote {args.out}/{{impact_estimator,request_classifier}}/1/model.onnx and {REPORT_FILE}")
    return 0
