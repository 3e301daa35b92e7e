"""`rps-serve classify`: estimate and classify requests with the ONNX cost model of a repository (within
the class edges of the engine its `vllm_model/model.json` configures, where it names its step), or as
a running server's `vllm_model` would class them now (with the online fit, where it refits)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rps_harness.client import ServedClasses
from rps_serve.cost.model import CostModel
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.requests import Modality, RequestClass, RequestFeatures
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.triton.names import SETTINGS_FILE


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("classify", help="estimate and classify requests with the ONNX cost model")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--repository", type=Path, metavar="DIR", help="where `train` wrote the models")
    where.add_argument(
        "--url", metavar="HOST:PORT", help="a running server's gRPC endpoint: how it would class them now"
    )
    parser.add_argument(
        "requests", nargs="+", type=_request, metavar="MODALITY:PROMPT_TOKENS[:MODALITY_TOKENS]"
    )
    parser.set_defaults(handler=run)


def _request(spec: str) -> RequestFeatures:
    """MODALITY:PROMPT_TOKENS[:MODALITY_TOKENS], e.g. text:200 or video:6300:6272."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"{spec!r}: expected MODALITY:PROMPT_TOKENS[:MODALITY_TOKENS]")
    try:
        tokens = [int(part) for part in parts[1:]]
        return RequestFeatures(Modality(parts[0]), *tokens)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{spec!r}: {error}") from None


def repository_classes(repository: Path) -> CostModel:
    """The repository's cost model, within the class edges of the step its model.json's engine
    arguments set (if any). Read as JSON here: the serving settings' reader imports the engine's
    code, which `classify` does not need."""
    model = OnnxCostModel.from_repository(repository)
    settings = repository / SETTINGS_FILE
    if not settings.is_file():
        return model
    step = json.loads(settings.read_text()).get("engine_args", {}).get("max_num_batched_tokens")
    return model if step is None else engine_classes(model, int(step))


def run(args: argparse.Namespace) -> int:
    model: CostModel | ServedClasses
    model = ServedClasses(args.url) if args.url else repository_classes(args.repository)
    print(f"{'request':<20} {'prefill ms':>10} {'KV tokens':>10}  class")
    for request, verdict in zip(args.requests, model.assess(args.requests), strict=True):
        name = RequestClass.for_level(verdict.level, model.num_classes).label
        spec = f"{request.modality.value}:{request.prompt_tokens}"
        print(
            f"{spec:<20} {verdict.estimate.prefill_s * 1000:10.1f} {verdict.estimate.memory_tokens:10d}"
            f"  {verdict.level} {name}"
        )
    return 0
