"""The client half of tools/gpu_check.sh: replay a mixed workload against a running server, then
report the runs as `rps-serve demo` does (the same client, tables and paired ratios)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

import numpy as np

from rps_harness.cli.arguments import cost_model_source
from rps_harness.comparison import ratio_rows, steady
from rps_harness.loadtest.demo_analysis import candidate_of
from rps_harness.loadtest.replay import build_requests, replay, warm_up
from rps_harness.loadtest.tables import ratio_table, ttft_table
from rps_harness.metrics import RequestRecords, concatenate_records
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.mixes import MIXES, mix_by_name
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.trace import generate_trace
from rps_serve.cost.runtime import aging_time_scale


def _replay(args: argparse.Namespace) -> None:
    trace = generate_trace(mix_by_name(args.mix), args.rate, args.requests, args.seed)
    # Prompts by the served model's own chat template; media a tiny model's own size, else 672x672
    # images and 24 frames of 448x448.
    served = RequestFormat.of_model(args.model)
    # Fresh text and pixels for every run: the prefix and multimodal caches would otherwise fake TTFT.
    content_seed = args.seed * 1000 + args.run
    warm_up(args.url, served, content_seed + 500)
    limits = ContentLimits(max_text_tokens=args.max_text_tokens)
    replayed = replay(args.url, trace, build_requests(trace, served, limits, content_seed))
    logging.info("%s: %s", args.out.stem, replayed.tally)
    np.savez(args.out, **dataclasses.asdict(replayed.records))
    if replayed.tally.lost:
        raise SystemExit(f"{replayed.tally.lost} requests got no final response")


def _load(path: Path) -> RequestRecords:
    with np.load(path) as saved:
        # np.savez stores the scalar `num_levels` as a 0-d array.
        fields = {name: saved[name] if saved[name].ndim else saved[name].item() for name in saved.files}
    return RequestRecords(**fields)


def _table(args: argparse.Namespace) -> None:
    runs: dict[str, list[RequestRecords]] = {}
    for path in args.records:  # POLICY-REPEAT.npz, each policy's seeds in the same order
        policy = path.stem.rpartition("-")[0]
        runs.setdefault(policy, []).append(_load(path))
    print(
        f"classes from the cost model in {args.repository}, trained on {cost_model_source(args.repository)} "
        f"(aging clock {aging_time_scale(args.repository):.2f}x the paper's)"
    )
    steady_runs = {policy: steady(records) for policy, records in runs.items()}
    seeds = len(next(iter(runs.values())))
    print(f"steady state of {seeds} paired run(s) per policy")
    print(ttft_table({policy: concatenate_records(records) for policy, records in steady_runs.items()}))
    candidate = candidate_of(runs)  # the plug-in's policy of those the script ran
    if candidate in steady_runs and len(steady_runs) > 1:
        print(ratio_table(ratio_rows(runs, candidate), candidate))
    for policy, records in runs.items():
        completed = sum(int(r.completed.sum()) for r in records)
        print(f"{policy}: {completed}/{sum(len(r.ttft) for r in records)} requests completed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("replay", help="replay the workload against a running server")
    run.add_argument("--url", required=True, help="gRPC HOST:PORT")
    run.add_argument("--model", type=Path, required=True, help="the model directory the server runs")
    run.add_argument("--mix", default="mixed-iii", choices=list(MIXES))
    run.add_argument("--rate", type=float, default=4.0, help="mean arrival rate, requests per second")
    run.add_argument("--requests", type=int, default=200)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--run", type=int, default=0, help="index of this run (fresh content per run)")
    run.add_argument("--max-text-tokens", type=int, default=4096, help="cap on a prompt's text tokens")
    run.add_argument("--out", type=Path, required=True, help="records file (.npz) named after the policy")
    table = commands.add_parser("table", help="TTFT per modality and paired ratios of saved runs")
    table.add_argument("--repository", type=Path, required=True, help="the model repository served")
    table.add_argument("records", type=Path, nargs="+", help="records files, named POLICY-REPEAT.npz")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    {"replay": _replay, "table": _table}[args.command](args)


if __name__ == "__main__":
    main()
