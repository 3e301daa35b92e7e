"""The online refit in the simulator, from a wrong fit: a device served with a cost model trained on
another (by default the 7B's H100 reference fit), classed request by request as the fit learns the
device's observed prefill costs (`sim.online`). Per seed: how a probe grid is classed against the
device's own fit before any update and after the last, the arrivals until the trace's classes agree
with the device's fit (90% of every 200 consecutive requests from then on), and what RPS's TTFTs are
under the online classes against the device's true classes and against the wrong fit kept frozen,
over the whole trace and over the requests that arrived before the classes agreed.

    .venv/bin/python benchmarks/online_convergence.py --reference llava-onevision-qwen2-7b --slow-images 20 \
        --rate 10 --requests 3000 --seeds 0,1,2
    .venv/bin/python benchmarks/online_convergence.py --profile build/profile/tiny-qwen2-vl.jsonl \
        --rate 2 --requests 1200 --seeds 0,1,2
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from rps_harness.sim.measured import as_served
from rps_harness.sim.online import Observation, arrivals_until_agreed, online_levels, probe_grid
from rps_harness.sim.run import SimulationConfig, class_levels, device_profile
from rps_harness.sim.simulator import policy_variant, simulate
from rps_harness.sim.timing import fit_lines
from rps_harness.workload.source import SyntheticWorkload
from rps_harness.workload.synthetic_profile import reference_profile, with_slower_images
from rps_serve.cost.online import OnlineCostModel, OnlineOptions
from rps_serve.cost.training import TrainingOptions, fit_cost_model
from rps_serve.profiles.reference import DEFAULT_REFERENCE
from rps_serve.requests import Modality

AGREED = 0.9  # the bar: classed as the device's own fit classes them
WINDOW = 200  # consecutive requests the share is taken over


def ttft_row(ttft: np.ndarray, modality: np.ndarray, sand: np.ndarray) -> str:
    text = ttft[modality == Modality.TEXT.index]
    video = ttft[modality == Modality.VIDEO.index]
    cells = [np.percentile(text, 90), np.percentile(ttft[sand], 90), video.mean() if video.size else np.nan]
    return " ".join(f"{c:9.3f}" for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=DEFAULT_REFERENCE, help="the device: a reference model")
    parser.add_argument(
        "--profile", type=Path, help="JSONL profile records whose prefill lines replace the reference's"
    )
    parser.add_argument("--slow-images", type=float, default=1.0, help="image admission times this")
    parser.add_argument("--start", default=DEFAULT_REFERENCE, help="the reference fit served at first")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--mix", default="mixed-iii")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()

    print(
        f"device {args.profile or args.reference} (images x{args.slow_images:g}), "
        f"started from {args.start}'s fit; "
        f"{args.requests} {args.mix} requests at {args.rate:g}/s; RPS TTFT in seconds"
    )
    print(
        f"{'seed':>4} {'probes':>11} {'arrivals':>8} {'updates':>7}  {'classes':<8} {'agree':>6} "
        f"{'text P90':>9} {'sand P90':>9} {'video mean':>9}  (all | before agreement)"
    )
    for seed in (int(s) for s in args.seeds.split(",")):
        workload = SyntheticWorkload(args.mix, args.rate, args.requests, seed)
        config = SimulationConfig(args.reference, args.gpus, workload, seed, profile=args.profile)
        deployment, records = device_profile(config)
        if args.slow_images != 1.0:
            records = with_slower_images(records, args.slow_images)
            deployment = replace(deployment, lines=fit_lines(records))
        training = TrainingOptions(seed=seed)
        truth = fit_cost_model(records, training)
        reference = reference_profile(args.start, seed=seed)
        start = fit_cost_model(reference, training)
        trace = workload.trace()
        isolated = deployment.isolated_engine_s(trace)
        span_s = trace.arrival_s[-1] - trace.arrival_s[0]
        print(f"seed {seed}: isolated engine seconds per second of arrivals {isolated.sum() / span_s:.2f}")
        online = online_levels(
            trace,
            deployment,
            OnlineCostModel.from_fit(
                start, training, OnlineOptions(enabled=True), [r.features for r in reference]
            ),
            truth,
            probe_grid(),
            Observation(seed=seed),
        )
        true_levels = class_levels(trace, truth)
        settled = arrivals_until_agreed(online.levels, true_levels, AGREED, WINDOW)
        before = slice(0, settled if settled is not None else len(trace))
        variant = as_served(policy_variant("rps"), deployment)
        sand = true_levels == 0
        for name, levels in (
            ("online", online.levels),
            ("true", true_levels),
            ("frozen", class_levels(trace, start)),
        ):
            outcome = simulate(trace, levels, truth.num_classes, variant, deployment)
            ttft, modality = outcome.records.ttft, trace.modality
            head = (
                f"{seed:>4} {online.start_agreement:>4.0%} -> {online.final_agreement:>4.0%} "
                f"{settled if settled is not None else '-':>8} "
                f"{len(online.updates):>7}"
                if name == "online"
                else " " * 33
            )
            agree = np.mean(levels == true_levels)
            print(
                f"{head}  {name:<8} {agree:>6.1%} {ttft_row(ttft, modality, sand)} | "
                f"{ttft_row(ttft[before], modality[before], sand[before])}"
            )


if __name__ == "__main__":
    main()
