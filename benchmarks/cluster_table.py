"""What class-aware picking is worth: replicas of the 7B on one H100 each, every replica running the
shipped policy, behind round-robin, least-queue (the llm-d router's default pick) and class-aware
routers, in the simulator's cluster mode (`rps_harness.sim.cluster`, routers in `rps_harness.sim.routing`).

Run: `python benchmarks/cluster_table.py [NAME ...] [--replicas 2,4,8] [--requests N] [--out DIR]`
(`make cluster-table`), NAME a setting of `h100_comparison.SETTINGS` (default: mixed-iii and
cost-vs-modality, at 0.9x). Each replica is `h100_comparison`'s 7B deployment (LLaVA-OneVision-7B on one GPU,
serving shapes, eager) running `POLICY`. The load is 0.9x of N times one replica's capacity, as
`h100_comparison` measures it (the highest Poisson rate at which FCFS's backlog stays bounded, on
`CAPACITY_REQUESTS` requests, so the very capacity the policy table runs at): every N and every router
then gets the same load per GPU, and the capacity does not depend on the router under test (a
cluster's own capacity would have to be searched behind one of them). Each run has `--requests` x N
requests. Per setting and N, each router's sand P90 TTFT, text P90 TTFT, mean normalized latency and
video mean TTFT (steady window, mean over the seeds) and the spread of requests over replicas; then
each router over round-robin and class-aware over least-queue per metric: the geometric mean of the
per-seed ratios with its 95% interval over seeds (`rps_harness.comparison.paired_ratio`), `=` where the
interval includes 1. The seeds are `h100_comparison.SEEDS`, fixed in code before any run; each
seed's trace goes through every router back to back; every run is reported. Deterministic: the same
commit prints the same table.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from experiments import SMALL
from h100_comparison import SEEDS, SETTINGS, Comparison, check_settings
from policy_table import METRICS
from rps_harness.comparison import paired_ratio, steady
from rps_harness.metrics import RequestRecords
from rps_harness.sim.routing import Routing
from rps_harness.sim.run import prepare, run_cluster

POLICY = "headroom"
NAMES = ("mixed-iii", "cost-vs-modality")
REPLICA_COUNTS = (2, 4, 8)
ROUTERS = (Routing.ROUND_ROBIN, Routing.LEAST_QUEUE, Routing.CLASS_AWARE)
# Each router over the one a deployment would otherwise run: a Service, then the llm-d router's default.
PAIRS = (
    (Routing.LEAST_QUEUE, Routing.ROUND_ROBIN),
    (Routing.CLASS_AWARE, Routing.ROUND_ROBIN),
    (Routing.CLASS_AWARE, Routing.LEAST_QUEUE),
)
# `h100_comparison`'s and `policy_table`'s default run length, so that the capacity is theirs.
CAPACITY_REQUESTS = 3500
# Per replica: the whole default table takes about 6 minutes on one core (3 minutes of CPU).
REQUESTS_PER_REPLICA = 2500


def _spread(routed: Sequence[np.ndarray]) -> str:
    """The fewest and most requests a replica got, over the seeds' runs."""
    return f"{min(int(r.min()) for r in routed)}-{max(int(r.max()) for r in routed)}"


def table(
    names: Sequence[str], replica_counts: Sequence[int], requests: int, out: Path
) -> list[dict[str, Any]]:
    """Print the table of every named setting at every replica count; returns what it printed, as JSON."""
    print(
        f"Every replica: 7B on 1 GPU, `{POLICY}`. {len(SEEDS)} seeds ({', '.join(map(str, SEEDS))}),"
        f" {requests} requests a replica; metrics over the steady window, mean over seeds.\n"
    )
    unit = Comparison(CAPACITY_REQUESTS, out)
    results = []
    for name in names:
        setting = SETTINGS[name]
        capacity = unit.capacity(SMALL, 1, setting)
        for replicas in replica_counts:
            rate = setting.load * replicas * capacity.rate
            cluster = Comparison(requests * replicas, out)
            runs: dict[Routing, list[RequestRecords]] = {r: [] for r in ROUTERS}
            routed: dict[Routing, list[np.ndarray]] = {r: [] for r in ROUTERS}
            preemptions: dict[Routing, list[int]] = {r: [] for r in ROUTERS}
            for seed in tqdm(SEEDS, desc=f"{name}, {replicas} replicas", leave=False):
                setup = prepare(cluster.config(SMALL, 1, setting, rate, seed))
                for routing in ROUTERS:
                    outcome = run_cluster(setup, POLICY, replicas, routing)
                    runs[routing].append(outcome.records)
                    routed[routing].append(outcome.routed)
                    preemptions[routing].append(int(outcome.preemptions.sum()))
            print(
                f"### {replicas} replicas, {name}: {setting.describe(capacity.rate)} a replica"
                f" ({rate:.2f} req/s in all), {requests * replicas} requests a run\n"
            )
            print(
                "| router | " + " | ".join(f"{m.name} (s)" for m in METRICS) + " | requests a replica"
                " | preemptions |\n|---|" + "---:|" * (len(METRICS) + 2)
            )
            absolute = {}
            for routing in ROUTERS:
                windows = steady(runs[routing])
                values = [float(np.mean([m.of(w) for w in windows])) for m in METRICS]
                absolute[routing.value] = dict(zip((m.name for m in METRICS), values, strict=True))
                cells = " | ".join(f"{v:.3g}" for v in values)
                print(
                    f"| {routing.value} | {cells} | {_spread(routed[routing])}"
                    f" | {sum(preemptions[routing])} |"
                )
            print("\n| ratio | " + " | ".join(m.name for m in METRICS) + " |\n|---|" + "---|" * len(METRICS))
            ratios = {}
            for candidate, baseline in PAIRS:
                row = {m.name: paired_ratio(runs[candidate], runs[baseline], m) for m in METRICS}
                label = f"{candidate.value} / {baseline.value}"
                ratios[label] = {k: r.to_json() for k, r in row.items()}
                print(f"| {label} | " + " | ".join(r.marked() for r in row.values()) + " |")
            print(flush=True)
            results.append(
                {
                    "setting": name,
                    "replicas": replicas,
                    "policy": POLICY,
                    "capacity_per_replica": capacity.rate,
                    "capacity_probes": [vars(p) for p in capacity.probes],
                    "rate": rate,
                    "requests": requests * replicas,
                    "seeds": list(SEEDS),
                    "absolute": absolute,
                    "routed": {r.value: [x.tolist() for x in routed[r]] for r in ROUTERS},
                    "preemptions": {r.value: preemptions[r] for r in ROUTERS},
                    "ratios": ratios,
                }
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"settings (default: {', '.join(NAMES)})")
    parser.add_argument("--replicas", default=",".join(map(str, REPLICA_COUNTS)), help="comma-separated")
    parser.add_argument("--requests", type=int, default=REQUESTS_PER_REPLICA, help="requests per replica")
    parser.add_argument("--out", type=Path, default=Path("out/cluster-table"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    check_settings(parser, args.names)
    replica_counts = [int(n) for n in args.replicas.split(",")]
    if min(replica_counts) < 1:
        parser.error("every replica count must be at least 1")
    results = table(args.names or list(NAMES), replica_counts, args.requests, args.out)
    (args.out / "cluster_table.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
