"""Where a `make fidelity` run's simulated TPOT parts from the engine's: step by step, and by step cost.

For one load and seed folder of `make fidelity` (its traces, run logs and measured stacks), each policy's
replay on the real engine against the simulator's replay of the same trace (`--terms`: the step terms
`fidelity.py` simulated with, `loaded` or `isolated`):
- decode-request seconds: every step's duration (the real engine's with the gap to its next step)
  times the requests decoding in it, summed over decode-only steps and over steps with a prefill. A
  request's TPOT is its decode time over its tokens, and both engines decode the same tokens, so
  these sums split the TPOT ratio between the two kinds of step;
- a decode-only step's duration by the number of requests decoding in it, both engines;
- the simulated TPOT and text TTFT over measured with every step term scaled by each of `--scales`:
  how much a given error in step cost moves those rows at this load.

`.venv/bin/python -m benchmarks.fidelity_steps out/fidelity/load-2.81/seed-0`
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.fidelity import RUN_LOG, replay_records
from rps_harness.metrics import grouped_metrics
from rps_harness.sim.engine import StepRecord
from rps_harness.sim.run import SimulationConfig, SimulationSetup, prepare, run_policy
from rps_harness.sim.step_fit import steps_from_records
from rps_harness.workload.source import TraceFile
from rps_harness.workload.trace import read_trace
from rps_serve.profiles.reference import DEFAULT_REFERENCE

POLICIES = ("fcfs", "rps")
LOADED_TERMS = ("step_s", "chunk_token_s", "kv_token_s")
MAX_BATCH = 9


@dataclasses.dataclass(frozen=True)
class StepComposition:
    """One engine's steps in a replay: duration (the real engine's with the busy gap after it), prefill
    tokens, requests decoding."""

    duration_s: np.ndarray
    prefill_tokens: np.ndarray
    decodes: np.ndarray

    def decode_seconds(self) -> tuple[float, float]:
        """Decode-request seconds in decode-only steps and in steps with a prefill."""
        weighted = self.decodes * self.duration_s
        decode_only = self.prefill_tokens == 0
        return float(weighted[decode_only].sum()), float(weighted[~decode_only].sum())

    def prefill_steps(self) -> tuple[int, float, float]:
        """How many steps carried a prefill, their mean duration and mean requests decoding in them."""
        mine = self.prefill_tokens > 0
        if not mine.any():
            return 0, float("nan"), float("nan")
        return int(mine.sum()), float(self.duration_s[mine].mean()), float(self.decodes[mine].mean())

    def decode_only_mean_s(self, batch: int) -> tuple[int, float]:
        """How many decode-only steps ran `batch` decodes, and their mean duration."""
        mine = (self.prefill_tokens == 0) & (self.decodes == batch)
        return int(mine.sum()), float(self.duration_s[mine].mean()) if mine.any() else float("nan")


def real_steps(run_log: Path, requests: int, kv_capacity_tokens: int) -> StepComposition:
    """The timed steps of a run log's replay (`sim.step_fit.steps_from_records`), each with the gap to
    the next step where the engine stayed busy (the gap the loaded fit adds to a step)."""
    _, records = replay_records(run_log, requests)
    steps = steps_from_records(records, run_log.stem, kv_capacity_tokens)
    gap_after = np.nan_to_num(np.r_[steps.gap_s[1:], np.nan])
    return StepComposition(steps.step_s + gap_after, steps.prefill_tokens, steps.decode_requests)


def simulated_steps(records: list[StepRecord]) -> StepComposition:
    return StepComposition(
        np.array([r.duration_s for r in records]),
        np.array([r.prefill_tokens for r in records]),
        np.array([r.decodes for r in records]),
    )


def scaled(measured: dict[str, Any], scale: float) -> dict[str, Any]:
    """A measured stack whose loaded step terms are `scale` times the fitted ones."""
    loaded = {**measured["loaded_steps"], **{k: measured["loaded_steps"][k] * scale for k in LOADED_TERMS}}
    return {**measured, "loaded_steps": loaded}


def prepared(measured: Path, trace: Path) -> SimulationSetup:
    """The simulator set up to replay `trace` on the stack `measured` (its classes trained once)."""
    return prepare(
        SimulationConfig(reference=DEFAULT_REFERENCE, gpus=1, workload=TraceFile(trace), measured=measured)
    )


def simulate(setup: SimulationSetup, policy: str) -> tuple[dict[str, Any], list[StepRecord]]:
    """The simulator's replay of `setup` under `policy`: its metrics and steps."""
    steps: list[StepRecord] = []
    outcome = run_policy(setup, policy, steps.append)
    return grouped_metrics(outcome.records), steps


def _tpot(metrics: dict[str, Any]) -> float:
    return float(metrics["overall"]["tpot"]["mean"])


def _text_ttft(metrics: dict[str, Any]) -> float:
    return float(metrics["by_modality"]["text"]["ttft"]["mean"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path, help="one load and seed of `make fidelity`'s output")
    parser.add_argument("--terms", default="loaded", choices=("loaded", "isolated"))
    parser.add_argument("--scales", default="1,0.95,0.9,0.85", help="step-term scales to simulate")
    args = parser.parse_args()
    folder: Path = args.folder
    requests = len(read_trace(folder / "trace.jsonl"))
    served = folder / "served.jsonl"
    measured_file = folder / f"measured-{args.terms}.json"
    measured = json.loads(measured_file.read_text())
    setup = prepared(measured_file, served)
    with tempfile.TemporaryDirectory() as scratch:
        rescaled = []
        if args.terms == "loaded":
            for scale in (float(s) for s in args.scales.split(",")):
                stack = Path(scratch) / f"measured-{scale}.json"
                stack.write_text(json.dumps(scaled(measured, scale)))
                rescaled.append((scale, prepared(stack, served)))
        for policy in POLICIES:
            bench = json.loads((folder / f"bench-{policy}.json").read_text())["results"][policy]
            server_log = folder / f"server-{policy}" / RUN_LOG
            real = real_steps(server_log, requests, measured["kv_capacity_tokens"])
            metrics, records = simulate(setup, policy)
            sim = simulated_steps(records)
            tpot = f"measured TPOT {_tpot(bench) * 1e3:.1f} ms, simulated {_tpot(metrics) * 1e3:.1f} ms"
            print(f"{folder} {policy}: {tpot}")
            for name, steps in (("engine", real), ("simulator", sim)):
                decode_only, with_prefill = steps.decode_seconds()
                count, mean_s, decoding = steps.prefill_steps()
                print(
                    f"  {name:9} {len(steps.duration_s):5d} steps; decode-request seconds: decode-only "
                    f"steps {decode_only:6.1f}, steps with a prefill {with_prefill:6.1f} ({count} steps, "
                    f"{mean_s * 1e3:.0f} ms and {decoding:.1f} decoding on average)"
                )
            print("  decode-only step by requests decoding: engine n, ms | simulator n, ms")
            for batch in range(1, MAX_BATCH + 1):
                (n_real, real_s), (n_sim, sim_s) = (
                    real.decode_only_mean_s(batch),
                    sim.decode_only_mean_s(batch),
                )
                print(f"    {batch}: {n_real:5d} {real_s * 1e3:6.2f} | {n_sim:5d} {sim_s * 1e3:6.2f}")
            for scale, stack_setup in rescaled:
                metrics, _ = simulate(stack_setup, policy)
                ratios = f"TPOT {_tpot(metrics) / _tpot(bench):.2f}, text TTFT "
                ratios += f"{_text_ttft(metrics) / _text_ttft(bench):.2f}"
                print(f"  step terms x{scale:.2f}: simulated/measured {ratios}")


if __name__ == "__main__":
    main()
