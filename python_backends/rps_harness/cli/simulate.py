"""`rps-serve simulate`: the vLLM V1 engine simulated at H100 scale under several policies."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rps_harness.cli.arguments import add_policies_argument, add_workload_arguments, policies, workload
from rps_harness.cli.train import add_reference_argument
from rps_harness.metrics import policy_table
from rps_harness.sim.hardware import Execution
from rps_harness.sim.run import SimulationConfig, default_shapes, run_simulation
from rps_harness.sim.simulator import POLICY_VARIANTS
from rps_serve.cost.classifier import MAX_CLASSES, MIN_CLASSES
from rps_serve.scheduling.parameters import SHIPPED_POLICY


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "simulate", help="simulate the vLLM V1 engine at H100 scale under several policies"
    )
    add_reference_argument(parser, "the simulated model (its H100 prefill lines, its sizes)")
    device = parser.add_mutually_exclusive_group()
    device.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="JSONL profile records (rps-serve profile): the prefill lines fitted to them replace the"
        " reference's; sizes stay the reference's",
    )
    device.add_argument(
        "--measured",
        type=Path,
        metavar="FILE",
        help="a measured serving stack (.json, benchmarks/fidelity.py): sets the whole device",
    )
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (tensor parallel; modserve splits them)")
    add_workload_arguments(parser)
    add_policies_argument(parser, f"fcfs,{SHIPPED_POLICY.value}", list(POLICY_VARIANTS))
    parser.add_argument(
        "--classes", type=int, default=3, choices=range(MIN_CLASSES, MAX_CLASSES + 1), help="k of k-means"
    )
    parser.add_argument(
        "--execution",
        choices=[e.value for e in Execution],
        default=Execution.GRAPH.value,
        help="CUDA graphs (vLLM's default) or eager (--enforce-eager, as the paper served)",
    )
    parser.add_argument(
        "--kv-capacity-tokens",
        type=int,
        metavar="N",
        help="a KV cache of N tokens instead of what the GPUs' memory leaves (KV pressure: vLLM's"
        " num_gpu_blocks_override x 16)",
    )
    parser.add_argument("--profile-gpus", type=int, default=1, help="GPUs a --profile file was measured on")
    parser.add_argument("--json", type=Path, metavar="FILE", required=True, help="where to write the results")
    parser.add_argument(
        "--plot", type=Path, metavar="PNG", help="also draw TTFT CDFs per modality and policy (PNG)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = SimulationConfig(
        gpus=args.gpus,
        workload=workload(args, default_shapes(args.reference, args.profile, args.measured)),
        seed=args.seed,
        classes=args.classes,
        reference=args.reference,
        profile=args.profile,
        profile_gpus=args.profile_gpus,
        measured=args.measured,
        execution=Execution(args.execution),
        kv_capacity_tokens=args.kv_capacity_tokens,
    )
    report, outcomes = run_simulation(config, policies(args))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(policy_table(report))
    print(f"wrote {args.json}")
    if args.plot:
        from rps_harness.plots import plot_ttft_cdf

        title = f"{config.describe()}, {args.gpus} GPU, {config.workload.describe()}"
        plot_ttft_cdf({name: outcome.records for name, outcome in outcomes.items()}, args.plot, title)
        print(f"wrote {args.plot}")
    return 0
