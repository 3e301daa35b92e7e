"""`rps-serve ab`: policies side by side on a real vLLM engine in this process (no Triton), a fresh
engine per run, runs interleaved and pooled."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rps_harness.cli.arguments import add_policies_argument, add_workload_arguments, policies, workload
from rps_harness.metrics import policy_table
from rps_serve.scheduling.parameters import SHIPPED_POLICY, Policy


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "ab", help="policies side by side on a real vLLM engine (fresh engine per run)"
    )
    parser.add_argument(
        "--model", type=Path, metavar="DIR", required=True, help="model built by `rps-serve make-tiny-model`"
    )
    add_workload_arguments(parser)
    add_policies_argument(parser, f"fcfs,vllm-priority,{SHIPPED_POLICY.value}", [p.value for p in Policy])
    parser.add_argument("--repeats", type=int, default=3, help="runs per policy, interleaved")
    parser.add_argument(
        "--cost-model",
        type=Path,
        metavar="DIR",
        help="ONNX cost model repository (default: classes by modality)",
    )
    parser.add_argument(
        "--renderer-workers", type=int, default=1, help="vLLM renderer threads (media preprocessing)"
    )
    parser.add_argument(
        "--chunk-cap", type=int, help="prefill chunk cap while a lighter class waits (0: off)"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", required=True, help="where to write the results")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.engine_ab.experiment import ABConfig, run_ab
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    configure_cpu_engine_environment(args.json.parent / ".vllm")
    rps_settings = {} if args.chunk_cap is None else {"chunk_cap_tokens": args.chunk_cap}
    config = ABConfig(
        model=args.model,
        workload=workload(args),
        policies=tuple(Policy.parse(p) for p in policies(args)),
        repeats=args.repeats,
        seed=args.seed,
        cost_model=args.cost_model,
        renderer_num_workers=args.renderer_workers,
        rps_settings=rps_settings,
    )
    report = run_ab(config)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(policy_table(report))
    print(f"pooled over {config.repeats} runs per policy; wrote {args.json}")
    return 0
