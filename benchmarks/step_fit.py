"""Fit the engine's step time from its own steps under load, and set it beside the simulator's model.

Reads server run logs (`RPS_RUN_LOG`, one JSON line per engine step: `triton.run_log`), fits the terms
of `rps_harness.sim.step_fit` on the steps of the positional logs, scores the fit on the `--held-out`
logs' steps (R^2, median absolute relative error, total seconds per run), and prints beside it what
the simulator's timing model (`sim.measured`: prefill lines from the isolated profile `--profile`, the
decode step and per-KV-token cost from isolated requests) charges for the same steps, part by part.

    python benchmarks/step_fit.py FIT.jsonl... --held-out TEST.jsonl... --profile PROFILE.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.sim.measured import MeasuredProfile, robust_lines
from rps_harness.sim.step_fit import (
    CPU_KV_CAPACITY_TOKENS,
    DEFAULT_TERMS,
    TERMS,
    StepModel,
    Steps,
    fit_steps,
    read_steps,
    score,
    simulator_step_s,
)
from rps_harness.sim.timing import TimingModel
from rps_serve.profiles.records import read_records
from rps_serve.requests import Modality

# The CPU stack's isolated decode costs (the measured profile of 30 November: the isolated requests'
# time per output token on their context, 5.5 ms + 0.68 us per context token).
DECODE_STEP_S = 5.5e-3
KV_TOKEN_S = 0.68e-6
MAX_NUM_BATCHED_TOKENS = 2048


def simulator_timing(profile: Path, decode_step_s: float, kv_token_s: float) -> TimingModel:
    """The timing the simulator runs a measured profile with (`MeasuredDeployment.timing`)."""
    measured = MeasuredProfile(
        name="cpu",
        lines=robust_lines(list(read_records(profile))),
        decode_step_s=decode_step_s,
        kv_token_s=kv_token_s,
        front_end_s={m: 0.0 for m in Modality},
        kv_capacity_tokens=CPU_KV_CAPACITY_TOKENS,
        max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
        max_num_seqs=256,
        rps_chunk_cap_tokens=256,
        cost_profile="",
    )
    return measured.deployment().timing(1)


def kinds(steps: Steps) -> dict[str, np.ndarray]:
    encoder = steps.encoder_inputs > 0
    prefill = (steps.prefill_tokens > 0) & ~encoder
    return {
        "decode only": (steps.prefill_tokens == 0) & ~encoder,
        "chunk, no encoder": prefill,
        "encoder": encoder,
        "all": np.ones(len(steps), dtype=bool),
    }


def report(model: StepModel, timing: TimingModel, fit: Steps, held_out: Steps) -> dict[str, Any]:
    simulated, parts = simulator_step_s(timing, held_out, MAX_NUM_BATCHED_TOKENS)
    predicted = model.predict(held_out)
    by_kind = {}
    for kind, mask in kinds(held_out).items():
        if not mask.any():
            continue
        gap = held_out.gap_s[mask]
        by_kind[kind] = {
            "fit": score(held_out.step_s[mask], predicted[mask]).as_dict(),
            "simulator": score(held_out.step_s[mask], simulated[mask]).as_dict(),
            "measured_mean_ms": 1000 * float(held_out.step_s[mask].mean()),
            "gap_median_ms": 1000 * float(np.nanmedian(gap)) if np.isfinite(gap).any() else None,
            "simulator_parts_mean_ms": {k: 1000 * float(v[mask].mean()) for k, v in parts.items()},
        }
    by_run = {}
    for run in np.unique(held_out.run):
        mask = held_out.run == run
        by_run[str(run)] = {
            "steps": int(mask.sum()),
            "measured_s": float(held_out.step_s[mask].sum()),
            "fit_s": float(predicted[mask].sum()),
            "simulator_s": float(simulated[mask].sum()),
            "gaps_s": float(np.nansum(held_out.gap_s[mask])),
        }
    return {
        "fit_steps": len(fit),
        "held_out_steps": len(held_out),
        "terms": model.named(),
        "in_sample": score(fit.step_s, model.predict(fit)).as_dict(),
        "by_kind": by_kind,
        "by_run": by_run,
        "simulator": {
            "prefill_step_s": timing.prefill_step_s,
            "token_s": timing.token_s,
            "decode_step_s": timing.decode_step_s,
            "kv_token_s": timing.kv_token_s,
            "encoder": {m.value: timing.encoder[m.index].__dict__ for m in Modality},
        },
    }


UNITS = {"chunk_context": (1e9, "ns"), "kv_token": (1e9, "ns"), "prefill_token": (1e6, "us")}


def print_report(result: dict[str, Any]) -> None:
    print(f"fitted on {result['fit_steps']} steps, held out {result['held_out_steps']}")
    meaning = dict(TERMS)
    for term, value in result["terms"].items():
        factor, unit = UNITS.get(term, (1e3, "ms"))
        print(f"  {term:16s} {value * factor:10.4f} {unit:2s}  {meaning[term]}")
    sample = result["in_sample"]
    print(f"in sample: R^2 {sample['r2']:.3f}, median |rel. error| {sample['median_abs_relative']:.3f}")
    print(
        "held out, by step kind: n, measured mean ms, R^2 / median |rel err| / total ratio (fit; simulator)"
    )
    for kind, row in result["by_kind"].items():
        f, s = row["fit"], row["simulator"]
        parts = ", ".join(f"{k} {v:.2f}" for k, v in row["simulator_parts_mean_ms"].items())
        print(
            f"  {kind:18s} n={f['steps']:5d} {row['measured_mean_ms']:8.2f} ms | fit {f['r2']:.3f} / "
            f"{f['median_abs_relative']:.3f} / {f['total_ratio']:.3f} | simulator {s['r2']:.3f} / "
            f"{s['median_abs_relative']:.3f} / {s['total_ratio']:.3f} | sim parts ms: {parts}"
        )
    print("held out, per run: steps, measured s, fit s, simulator s, gaps between busy steps s")
    for run, row in result["by_run"].items():
        print(
            f"  {run:28s} {row['steps']:5d} {row['measured_s']:8.2f} {row['fit_s']:8.2f} "
            f"{row['simulator_s']:8.2f} {row['gaps_s']:8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("logs", nargs="+", type=Path, help="run logs whose steps the terms are fitted on")
    parser.add_argument("--held-out", nargs="+", type=Path, required=True, help="run logs to test on")
    parser.add_argument("--profile", type=Path, required=True, help="isolated profile records (JSON lines)")
    parser.add_argument("--decode-step-ms", type=float, default=DECODE_STEP_S * 1e3)
    parser.add_argument("--kv-token-us", type=float, default=KV_TOKEN_S * 1e6)
    parser.add_argument("--kv-capacity-tokens", type=int, default=CPU_KV_CAPACITY_TOKENS)
    parser.add_argument("--terms", default=",".join(DEFAULT_TERMS), help="comma-separated subset of terms")
    parser.add_argument("--relative", action="store_true", help="fit relative, not absolute, errors")
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args()
    fit = Steps.concat([read_steps(p, args.kv_capacity_tokens) for p in args.logs])
    held_out = Steps.concat([read_steps(p, args.kv_capacity_tokens) for p in args.held_out])
    model = fit_steps(fit, args.terms.split(","), relative=args.relative)
    timing = simulator_timing(args.profile, args.decode_step_ms / 1e3, args.kv_token_us / 1e6)
    result = report(model, timing, fit, held_out)
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
