"""Simulator fidelity on the CPU stack: the same traces on the real server and in the simulator.

1. `rps-serve profile` the tiny model (engine settings of model.json; skipped when complete);
2. the rate the server sustains, measured closed-loop on a fresh server (as `rps-serve demo`
   measures it), unless `--rate` gives the rates;
3. per load (`--load-fraction` x that rate) and seed (`--seeds`, fixed before the first run and
   printed): `rps-serve trace` one workload trace, then per policy, in an order that rotates with the
   seed, a fresh server under policy P, started as `rps-serve serve --policy P` starts it
   (`local.server.launch_server`; its run log kept: `triton.run_log`), and `rps-serve bench --trace`
   against it through `rps_ensemble` (its isolated runs, one request at a time, first);
4. a measured simulator profile (`rps_harness.sim.measured`): prefill lines from the profile, decode
   step and front-end cost from the isolated runs of step 3 (no loaded run is used), the front-end
   workers and the plug-in's settings of model.json, the aging clock of the served cost model;
5. `rps-serve simulate --measured measured.json --trace served.jsonl`, where served.jsonl is the trace
   with the token counts the server saw (the bench's prompts, tokenized; the model's media sizes);
6. per row (load, policy, TTFT mean and P90 per modality, TPOT mean), simulated over measured per
   seed, and over seeds their geometric mean with a 95% t-interval on the logarithms (the seed is the
   unit, as in `rps_harness.comparison`): `fidelity.json` and a table. Every run is reported.

Placed as `rps-serve demo` places its runs (`loadtest.placement`): the engine's worker on a core of
its own, this script and everything it starts on the others (`--no-pin`: where the OS puts them).

`python benchmarks/fidelity.py --out out/fidelity` (`make fidelity`); about 40 minutes on 2 cores
(3 seeds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.comparison import log_t_interval
from rps_harness.loadtest.capacity import measure_capacity, request_stream
from rps_harness.loadtest.load import ISOLATED_SEED_OFFSET, isolated_rows, subset_trace
from rps_harness.loadtest.placement import Placement
from rps_harness.loadtest.run_analysis import in_window, read_run_log
from rps_harness.local.checkout import PROFILES, REPOSITORY, TINY_MODEL
from rps_harness.local.repository import ready_to_serve
from rps_harness.local.server import EngineSettings, launch_server
from rps_harness.sim.measured import (
    LoadedSteps,
    MeasuredProfile,
    decode_costs,
    front_end_seconds,
    robust_lines,
)
from rps_harness.sim.step_fit import Steps, loaded_steps, steps_from_records
from rps_harness.workload.content import ContentLimits, plan_content
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.trace import Trace, read_trace, write_trace
from rps_harness.workload_profiler.plan import ProfilePlan
from rps_serve.cost.runtime import aging_time_scale, trained_profile_name
from rps_serve.profiles.records import read_records
from rps_serve.requests import Modality
from rps_serve.triton.settings import load_settings
from rps_serve.vllm_plugin.config import RPSConfig

CLI = [str(Path(sys.executable).parent / "rps-serve")]
KV_CACHE_GIB = 1  # configure_cpu_engine_environment's VLLM_CPU_KVCACHE_SPACE
MAX_NUM_SEQS = 256  # not binding at these loads


def _run(args: list[str]) -> None:
    print("$", " ".join(["rps-serve", *args[1:]] if args[0] == CLI[0] else args), flush=True)
    subprocess.run(args, check=True)


def profile_command(path: Path, repeats: int, resume: bool) -> list[str]:
    """`rps-serve profile` of the tiny model, with the repository's engine settings."""
    return [*CLI, "profile", "--model", str(TINY_MODEL), "--out", str(path), "--repeats", str(repeats),
            *(["--resume"] if resume else [])]  # fmt: skip


def _profile(out: Path, repeats: int) -> Path:
    path = out / "profile.jsonl"
    expected = len(ProfilePlan(repeats=repeats).items())
    done = sum(1 for _ in read_records(path)) if path.exists() else 0
    if done < expected:
        _run(profile_command(path, repeats, resume=done > 0))
    return path


RUN_LOG = "run-log.jsonl"  # in a server's workdir


@contextmanager
def _serve(policy: str, workdir: Path) -> Iterator[str]:
    """A fresh server on the checkout's repository under `policy`, as `rps-serve serve --policy`
    starts one (free ports), its run log in `workdir`; its gRPC address while it runs."""
    ready_to_serve(REPOSITORY)
    print(f"{policy}: starting tritonserver (log {workdir / 'tritonserver.log'})", flush=True)
    engines = EngineSettings(policy=policy, run_log=workdir / RUN_LOG)
    with launch_server(REPOSITORY, workdir.resolve(), engines) as endpoints:
        yield endpoints.grpc_url


def _bench_on_fresh_server(policy: str, out: Path, bench_args: list[str]) -> Path:
    """`rps-serve bench` against a fresh server running `policy`."""
    with _serve(policy, out / f"server-{policy}") as url:
        result = out / f"bench-{policy}.json"
        _run([*CLI, "bench", "--url", url, *bench_args, "--label", policy, "--json", str(result),
              "--plot", str(out / f"bench-{policy}.png"), "--no-progress"])  # fmt: skip
        return result


def served_trace(trace: Trace, served: RequestFormat, limits: ContentLimits, seed: int) -> Trace:
    """`trace` with the prompt tokens the server sees for the bench's content of `seed`: the prompt
    tokenized by the model's tokenizer, its one media placeholder expanded to the media's tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(TINY_MODEL))
    plan = plan_content(trace, served, limits)
    counts = np.array([len(tokenizer(c.prompt)["input_ids"]) for c in plan.contents(served, seed)])
    visual = plan.visual_tokens
    return Trace(
        arrival_s=trace.arrival_s,
        kind=trace.kind,
        prompt_tokens=counts - (visual > 0) + visual,
        modality_tokens=visual,
        output_tokens=plan.output_tokens,
    )


def _isolated(reports: list[dict[str, Any]], subset: Trace, key: str) -> np.ndarray:
    """Every bench's isolated `key` (ttft_s, tpot_s), aligned with `subset` (trace order per modality)."""
    runs = []
    for report in reports:
        values = np.full(len(subset), np.nan)
        for modality in Modality:
            measured = report["config"]["isolated_runs"][modality.value][key]
            values[subset.modality == modality.index] = measured
        runs.append(values)
    return np.concatenate(runs)


def served_profile(repository: Path) -> Path:
    """The profile file the repository's cost model was trained on (`make model-repository`'s, under
    `build/profile`, by the name its report gives), so the simulator classes requests as the server
    does."""
    name = trained_profile_name(repository)
    if name is None or not (PROFILES / name).is_file():
        raise FileNotFoundError(f"{repository}'s cost model was not trained on a profile in {PROFILES}")
    return PROFILES / name


def measured_profile(
    profile: Path, reports: list[dict[str, Any]], isolated: Trace, name: str
) -> MeasuredProfile:
    settings = load_settings(REPOSITORY)
    lines = robust_lines(list(read_records(profile)))
    repeated = Trace(*(np.tile(column, len(reports)) for column in _columns(isolated)))
    # Decoding attends to the prompt and the tokens generated so far: half the output on average.
    context = repeated.prompt_tokens + repeated.output_tokens / 2
    step_s, kv_token_s = decode_costs(
        context, _isolated(reports, isolated, "tpot_s"), lines[Modality.TEXT].slope
    )
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(str(TINY_MODEL)).get_text_config()
    head_dim = text.hidden_size // text.num_attention_heads
    kv_bytes_per_token = 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * 4  # float32 KV
    draft = MeasuredProfile(
        name=name,
        lines=lines,
        decode_step_s=step_s,
        kv_token_s=kv_token_s,
        front_end_s={m: 0.0 for m in Modality},
        kv_capacity_tokens=KV_CACHE_GIB * 2**30 // kv_bytes_per_token,
        max_num_batched_tokens=int(settings.engine_args["max_num_batched_tokens"]),
        max_num_seqs=MAX_NUM_SEQS,
        rps_chunk_cap_tokens=int(settings.rps.get("chunk_cap_tokens", RPSConfig().chunk_cap_tokens)),
        cost_profile=str(served_profile(REPOSITORY)),
        front_end_workers=settings.front_end_workers,
        rps_decode_hold_s=float(settings.rps.get("decode_hold_s", RPSConfig().decode_hold_s)),
        rps_decode_hold_media_only=bool(
            settings.rps.get("decode_hold_media_only", RPSConfig().decode_hold_media_only)
        ),
        rps_max_preemptions=int(settings.rps.get("max_preemptions", RPSConfig().max_preemptions)),
        rps_cost_order=float(settings.rps.get("cost_order", RPSConfig().cost_order)),
        rps_light_steps=bool(settings.rps.get("light_steps", RPSConfig().light_steps)),
        rps_light_step_tokens=int(settings.rps.get("light_step_tokens", RPSConfig().light_step_tokens)),
        aging_time_scale=aging_time_scale(REPOSITORY),
    )
    front = front_end_seconds(draft.deployment(), repeated, _isolated(reports, isolated, "ttft_s"))
    return MeasuredProfile(**{**draft.__dict__, "front_end_s": front})


def _columns(trace: Trace) -> tuple[np.ndarray, ...]:
    return (trace.arrival_s, trace.kind, trace.prompt_tokens, trace.modality_tokens, trace.output_tokens)


def _error(simulated: float | None, measured: float | None) -> float | None:
    if simulated is None or measured is None or measured == 0:
        return None
    return simulated / measured - 1


# What is compared: (group, name, metric, stat) of the metrics JSON; group "overall" has no name.
COMPARED = [
    *(("by_modality", m.value, "ttft", stat) for m in Modality for stat in ("mean", "p90")),
    ("overall", "", "tpot", "mean"),
]


def compare(
    load: str, seed: int, bench: dict[str, dict[str, Any]], simulated: dict[str, Any]
) -> list[dict[str, Any]]:
    """One row per policy and compared metric of one seed's runs."""
    rows = []
    for policy, report in bench.items():
        for group, name, metric, stat in COMPARED:
            real = report["results"][policy][group]
            sim = simulated["results"][policy][group]
            if name:
                real, sim = real[name], sim[name]
            measured, predicted = real[metric][stat], sim[metric][stat]
            rows.append(
                {
                    "load": load,
                    "seed": seed,
                    "policy": policy,
                    "what": f"{name or 'all'} {metric}",
                    "stat": stat,
                    "measured_s": measured,
                    "simulated_s": predicted,
                    "error": _error(predicted, measured),
                    "count": real["count"],
                }
            )
    return rows


def _sustained_rate(out: Path, args: argparse.Namespace, limits: ContentLimits) -> float:
    """Completed requests per second of a fresh server with 16 requests always in flight."""
    workdir = out / "server-capacity"
    with _serve("fcfs", workdir) as url:
        requests = request_stream(args.mix, RequestFormat.of_model(TINY_MODEL), 0, 0, limits)
        capacity = measure_capacity(url, requests, args.calibrate_s)
    print(
        f"sustained {capacity.rate:.2f} req/s ({capacity.completed} in {capacity.duration_s:g} s)", flush=True
    )
    if capacity.rate <= 0:
        raise RuntimeError(f"the server completed no request in {args.calibrate_s:g} s")
    return capacity.rate


def _measure_load(
    out: Path,
    rate: float,
    seed: int,
    args: argparse.Namespace,
    limits: ContentLimits,
    profile: Path,
    policies: list[str],
) -> None:
    """One trace of `seed` at `rate` on the real server under every policy (in the order given), and
    the measured simulator profile of its isolated runs (`measured.json`), in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    trace_file = out / "trace.jsonl"
    _run([*CLI, "trace", "--mix", args.mix, "--rate", f"{rate:.3f}", "--requests", str(args.requests),
          "--seed", str(seed), "--out", str(trace_file)])  # fmt: skip
    bench_args = ["--trace", str(trace_file), "--seed", str(seed), "--isolated", str(args.isolated),
                  "--max-text-tokens", str(limits.max_text_tokens),
                  "--max-output-tokens", str(limits.max_output_tokens)]  # fmt: skip
    for policy in policies:
        if not (args.reuse_bench and (out / f"bench-{policy}.json").exists()):
            _bench_on_fresh_server(policy, out, bench_args)
    bench = [json.loads((out / f"bench-{policy}.json").read_text()) for policy in policies]

    trace = read_trace(trace_file)
    request_format = RequestFormat.of_model(TINY_MODEL)
    write_trace(out / "served.jsonl", served_trace(trace, request_format, limits, seed))
    subset = subset_trace(trace, isolated_rows(trace, args.isolated))
    isolated = served_trace(subset, request_format, limits, seed + ISOLATED_SEED_OFFSET)
    measured = measured_profile(profile, bench, isolated, "tiny-qwen2-vl-cpu")
    (out / "measured.json").write_text(json.dumps(measured.to_json(), indent=1) + "\n")


def _simulate(
    out: Path, load: str, seed: int, policies: list[str], model: str, measured: MeasuredProfile
) -> list[dict[str, Any]]:
    """The runs in `out` replayed in the simulator on `measured` (`model` names its step terms); the
    rows against the measured runs."""
    profile_file = out / f"measured-{model}.json"
    profile_file.write_text(json.dumps(measured.to_json(), indent=1) + "\n")
    simulated_file = out / f"simulate-{model}.json"
    _run([*CLI, "simulate", "--measured", str(profile_file), "--trace", str(out / "served.jsonl"),
          "--seed", "0", "--policies", ",".join(policies), "--json", str(simulated_file)])  # fmt: skip
    bench = {policy: json.loads((out / f"bench-{policy}.json").read_text()) for policy in policies}
    rows = compare(load, seed, bench, json.loads(simulated_file.read_text()))
    return [{"model": model, **row} for row in rows]


def measured_engine_s(run_log: Path, trace: Trace) -> np.ndarray | None:
    """Per request of `trace` (its order), the engine's part of its TTFT on the server: from its hand-off
    to vLLM's `generate` to its first token (the run log's vLLM input, engine-queue and prefill
    stages). The engine core takes new requests in between steps, so the wait for the step in
    progress lies in the first of them; vLLM's own input processing (10-20 ms a request alone) does
    too, which the simulator counts in its front end. None where the log has fewer requests."""
    replay, _ = replay_records(run_log, len(trace))
    if len(replay) < len(trace):
        return None
    return np.array([r["vllm_input_s"] + r["engine_queue_s"] + r["prefill_s"] for r in replay])


def stage_rows(folder: Path, load: str, seed: int, policies: list[str], model: str) -> list[dict[str, Any]]:
    """Where TTFT goes, measured and simulated, per policy and modality, as rows of `compare`'s form:
    "MODALITY engine" (`measured_engine_s`; the simulator's from the engine seeing a request to its
    first token) and "MODALITY rest" (the front end, the ensemble's steps, gRPC and the client: the
    client's TTFT less the engine's part; the simulator's front end)."""
    trace = read_trace(folder / "trace.jsonl")
    simulated = json.loads((folder / f"simulate-{model}.json").read_text())["results"]
    rows = []
    for policy in policies:
        engine = measured_engine_s(folder / f"server-{policy}" / RUN_LOG, trace)
        bench = json.loads((folder / f"bench-{policy}.json").read_text())["results"][policy]
        for modality in Modality:
            mine = trace.modality == modality.index
            ttft = bench["by_modality"][modality.value]["ttft"]["mean"]
            engine_s = None if engine is None or not mine.any() else float(engine[mine].mean())
            rest_s = None if engine_s is None or ttft is None else ttft - engine_s
            sim = simulated[policy]["stages"][modality.value]
            for part, measured, predicted in (
                ("engine", engine_s, sim["engine_s"]),
                ("rest", rest_s, sim["front_end_s"]),
            ):
                rows.append(
                    {
                        "model": model,
                        "load": load,
                        "seed": seed,
                        "policy": policy,
                        "what": f"{modality.value} {part}",
                        "stat": "mean",
                        "measured_s": measured,
                        "simulated_s": predicted,
                        "error": _error(predicted, measured),
                        "count": int(mine.sum()),
                    }
                )
    return rows


def replay_records(run_log: Path, requests: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A server's run log cut to the replay of a trace of `requests` requests: its request records (the
    last `requests` by arrival: the warm-up and isolated runs come first) and its step records from
    the first of them on."""
    records = read_run_log(run_log)
    requests_in = sorted((r for r in records if r["kind"] == "request"), key=lambda r: r["arrival"])
    replay = requests_in[-requests:]
    start = replay[0]["arrival"] if replay else math.inf
    return replay, in_window(records, "step", start, math.inf)


def steps_of(folders: list[Path], policies: list[str], kv_capacity_tokens: int) -> Steps:
    """The engine steps of the replays in `folders` (their run logs), the isolated runs left out."""
    parts = []
    for folder in folders:
        requests = len(read_trace(folder / "trace.jsonl"))
        for policy in policies:
            _, records = replay_records(folder / f"server-{policy}" / RUN_LOG, requests)
            parts.append(steps_from_records(records, f"{folder.name}-{policy}", kv_capacity_tokens))
    return Steps.concat(parts)


SUMMARY_KEYS = ("model", "load", "policy", "what", "stat")


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (step model, load, policy, metric, stat): simulated over measured per seed, their geometric
    mean and 95% t-interval over seeds (None where fewer than two seeds have both values)."""
    summary = []
    for (model, load, policy, what, stat), seeds in _by_key(rows, SUMMARY_KEYS).items():
        ratios = [r["error"] + 1 for r in seeds if r["error"] is not None]
        estimate, low, high = log_t_interval(ratios) if len(ratios) >= 2 else (math.nan,) * 3
        summary.append(
            {
                "model": model,
                "load": load,
                "policy": policy,
                "what": what,
                "stat": stat,
                "seeds": len(ratios),
                "ratios": ratios,
                "ratio": None if math.isnan(estimate) else estimate,
                "interval": None if math.isnan(estimate) else [low, high],
                "within_15": None if math.isnan(estimate) else abs(estimate - 1) <= 0.15,
                "interval_within_15": None if math.isnan(estimate) else low >= 0.85 and high <= 1.15,
            }
        )
    return summary


def _by_key(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    return groups


def rotated(policies: list[str], index: int) -> list[str]:
    """The policies in the order seed number `index` runs them: rotated by one each seed."""
    shift = index % len(policies)
    return policies[shift:] + policies[:shift]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/fidelity"))
    parser.add_argument("--mix", default="mixed-iii")
    parser.add_argument("--rate", help="arrival rates, comma-separated (default: --load-fraction)")
    parser.add_argument(
        "--load-fraction", default="0.6,0.9", help="these x the measured sustained rate, comma-separated"
    )
    parser.add_argument("--calibrate-s", type=float, default=60.0, help="how long to measure the rate")
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument(
        "--seeds", default="0,1,2", help="trace and content seeds, comma-separated (fixed before a run)"
    )
    parser.add_argument("--max-output-tokens", type=int, default=64)
    parser.add_argument("--isolated", type=int, default=5, help="isolated requests per modality per server")
    parser.add_argument("--policies", default="fcfs,rps")
    parser.add_argument("--profile-repeats", type=int, default=5)
    parser.add_argument(
        "--reuse-bench",
        action="store_true",
        help="keep the bench-POLICY.json and loads of an earlier run in --out (rebuild the rest)",
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="leave the engine's worker where the OS puts it"
    )
    args = parser.parse_args()

    placement = None if args.no_pin else Placement.split()
    if placement is not None:
        placement.pin_this_process()  # the servers and clients started from here inherit it
        os.environ.update(placement.environment())
        print(placement.describe(), flush=True)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    print(f"seeds {seeds} (fixed before the first run), policies {policies}", flush=True)
    profile = _profile(out, args.profile_repeats)
    limits = ContentLimits(max_text_tokens=4096, max_output_tokens=args.max_output_tokens)
    previous = out / "fidelity.json"
    if args.reuse_bench and previous.exists():
        loads = json.loads(previous.read_text())["loads"]
        print(f"the loads of {previous}: {loads}", flush=True)
    elif args.rate:
        loads = {f"{float(r):g} req/s": float(r) for r in args.rate.split(",")}
    else:
        sustained = _sustained_rate(out, args, limits)
        loads = {f"{float(f):g}x": float(f) * sustained for f in args.load_fraction.split(",")}
    folders: dict[tuple[str, int], Path] = {}
    for name, rate in loads.items():
        for index, seed in enumerate(seeds):
            order = rotated(policies, index)
            print(f"\nload {name}: {rate:.2f} req/s, seed {seed}, policies in order {order}", flush=True)
            folders[name, seed] = out / f"load-{rate:.2f}" / f"seed-{seed}"
            _measure_load(folders[name, seed], rate, seed, args, limits, profile, order)
    rows, stages = [], []
    loaded_by_load: dict[str, LoadedSteps | None] = {}
    for (name, seed), folder in folders.items():
        isolated = MeasuredProfile.from_json(json.loads((folder / "measured.json").read_text()))
        rows += _simulate(folder, name, seed, policies, "isolated", isolated)
        stages += stage_rows(folder, name, seed, policies, "isolated")
        if name not in loaded_by_load:
            # Step terms fitted on the other loads' runs only: what this load's runs are compared
            # with has no part in the simulator's model of them. One fit serves the load's seeds.
            others = [f for (other, _), f in folders.items() if other != name]
            fitted = loaded_steps(steps_of(others, policies, isolated.kv_capacity_tokens)) if others else None
            print(f"{name}: step terms of the other loads' runs {fitted}", flush=True)
            loaded_by_load[name] = fitted
        loaded = loaded_by_load[name]
        if loaded is not None:
            rows += _simulate(folder, name, seed, policies, "loaded", replace(isolated, loaded_steps=loaded))
            stages += stage_rows(folder, name, seed, policies, "loaded")
    summary = summarize(rows + stages)
    settings = vars(args) | {"out": str(out), "seeds": seeds}
    (out / "fidelity.json").write_text(
        json.dumps(
            {"settings": settings, "loads": loads, "rows": rows, "summary": summary, "stages": stages},
            indent=1,
        )
        + "\n"
    )
    print(
        f"{'steps':<8} {'load':<8} {'seed':>4} {'policy':<6} {'what':<10} {'stat':<4} {'n':>4}"
        f" {'measured s':>10} {'simulated s':>11} {'error':>7}"
    )
    for r in rows + stages:
        error = "-" if r["error"] is None else f"{r['error']:+.0%}"
        measured_s = "-" if r["measured_s"] is None else f"{r['measured_s']:.3f}"
        simulated_s = "-" if r["simulated_s"] is None else f"{r['simulated_s']:.3f}"
        print(
            f"{r['model']:<8} {r['load']:<8} {r['seed']:>4} {r['policy']:<6} {r['what']:<10} {r['stat']:<4}"
            f" {r['count']:>4} {measured_s:>10} {simulated_s:>11} {error:>7}"
        )
    print(f"\nsimulated / measured over {len(seeds)} seeds (geometric mean, 95% interval):")
    for r in summary:
        shown = (
            "-"
            if r["ratio"] is None
            else f"{r['ratio']:.2f} [{r['interval'][0]:.2f}, {r['interval'][1]:.2f}]"
        )
        print(
            f"{r['model']:<8} {r['load']:<8} {r['policy']:<6} {r['what']:<10} {r['stat']:<4}"
            f" n={r['seeds']} {shown}"
        )
    print(f"wrote {out / 'fidelity.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
