"""The online refit on a real server from a deliberately wrong start, batch by batch: tritonserver on a
copy of the repository whose cost model is fitted to the served model's profile with its image and
video admission times divided by `--media-speedup` (lines that many times too fast, and the class
boundaries k-means drew under them), `cost_model_online` on, serving the tiny model. A fixed budget of
mixed requests (seeded) goes through `rps_ensemble` in batches; before the first and after each,
the server's `vllm_model` is asked how it classes a probe grid (`client.ServedClasses`, as
`rps-serve classify --url`), and the answer is compared with the classes of the cost model trained on
the unaltered profile, with the updates the metrics endpoint shows. The budget is set before the run
and spent whatever the agreement; the first batch to reach `AGREED` is only reported.

    .venv/bin/python benchmarks/online_server_convergence.py --media-speedup 10 --requests 240 \
        --batch 30 --rate 2 --interval-s 2 --seed 0 --out out/online-convergence
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rps_harness.client import ServedClasses
from rps_harness.loadtest.replay import build_requests, replay
from rps_harness.loadtest.server_stats import ServedFit, scrape
from rps_harness.local.checkout import PROFILES, TINY_MODEL
from rps_harness.local.repository import online_refit_copy
from rps_harness.local.server import EngineSettings, launch_server
from rps_harness.sim.online import probe_grid
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.source import SyntheticWorkload
from rps_harness.workload.synthetic_profile import with_slower_admission
from rps_harness.workload.trace import Trace
from rps_serve.cost.model import Assesses, agreement, agreement_by_modality
from rps_serve.cost.training import TrainingOptions, fit_cost_model, train_cost_model
from rps_serve.profiles.records import read_records
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

AGREED = 0.9  # the bar: the probe grid classed as the profile-trained cost model classes it
CONTENT = ContentLimits(max_text_tokens=4096, max_output_tokens=8)
MEDIA = (Modality.IMAGE, Modality.VIDEO)


@dataclass(frozen=True)
class Checkpoint:
    """The server after `sent` requests: its probe-grid agreement and the refit its metrics show."""

    sent: int
    completed: int
    agreement: float
    by_modality: dict[str, float]
    updates: int
    observed: int
    boundary_updates: int

    def row(self) -> str:
        modalities = " ".join(f"{a:5.0%}" for a in self.by_modality.values())
        return (
            f"{self.sent:5d} {self.completed:5d} {self.agreement:6.0%}  {modalities}"
            f" {self.updates:7d} {self.observed:8d} {self.boundary_updates:6d}"
        )


def wrong_start(repository: Path, profile: Path, speedup: float) -> None:
    """Train `repository`'s cost models on `profile` with image and video admission `speedup` times
    faster than measured."""
    records = with_slower_admission(list(read_records(profile)), 1 / speedup, MEDIA)
    source = f"profile data {profile.name}, image and video admission / {speedup:g}"
    train_cost_model(records, repository, TrainingOptions(), source)


def batch_of(trace: Trace, start: int, stop: int) -> Trace:
    """Rows `start:stop` of `trace`, arriving from time 0."""
    arrivals = trace.arrival_s[start:stop]
    return Trace(
        arrivals - arrivals[0],
        trace.kind[start:stop],
        trace.prompt_tokens[start:stop],
        trace.modality_tokens[start:stop],
        trace.output_tokens[start:stop],
    )


def checkpoint(
    served: ServedClasses,
    truth: Assesses,
    probes: list[RequestFeatures],
    metrics_url: str,
    sent: int,
    done: int,
) -> Checkpoint:
    fit = ServedFit.of(scrape(metrics_url))
    if fit is None:
        raise RuntimeError("the server shows no online fit: is cost_model_online on?")
    return Checkpoint(
        sent=sent,
        completed=done,
        agreement=agreement(served, truth, probes),
        by_modality=agreement_by_modality(served, truth, probes),
        updates=fit.updates,
        observed=fit.observed,
        boundary_updates=fit.boundary_updates,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=TINY_MODEL)
    parser.add_argument(
        "--profile",
        type=Path,
        default=PROFILES / f"{TINY_MODEL.name}.jsonl",
        help="the served model's profile",
    )
    parser.add_argument(
        "--media-speedup", type=float, default=10.0, help="how much too fast the start's media lines are"
    )
    parser.add_argument("--requests", type=int, default=240, help="the request budget, spent in full")
    parser.add_argument("--batch", type=int, default=30, help="requests between two looks at the grid")
    parser.add_argument("--rate", type=float, default=2.0, help="arrivals per second within a batch")
    parser.add_argument("--mix", default="mixed-iii")
    parser.add_argument("--interval-s", type=float, default=2.0, help="cost_model_online's interval")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("out/online-convergence"))
    args = parser.parse_args()

    work = args.out.resolve()
    repository = online_refit_copy(work, args.interval_s)
    wrong_start(repository, args.profile, args.media_speedup)
    configure_cpu_engine_environment(work / "vllm")

    probes = probe_grid()
    truth = fit_cost_model(list(read_records(args.profile)), TrainingOptions())
    trace = SyntheticWorkload(args.mix, args.rate, args.requests, args.seed).trace()
    requests = build_requests(trace, RequestFormat.of_model(args.model), CONTENT, args.seed)
    settle_s = 3 * args.interval_s  # the feed reads the last records of a batch within an interval or two
    print(f"start: {args.profile.name} with image and video admission / {args.media_speedup:g}; ", end="")
    print(f"probe grid: {len(probes)} requests ({len(probes) // len(Modality)} prompt lengths per modality)")
    print("sent  done  agree  " + " ".join(f"{m.value:>5}" for m in Modality) + " updates observed  moved")
    points: list[Checkpoint] = []
    started = time.monotonic()
    with launch_server(
        repository, work / "server", EngineSettings(model=args.model), work / "tritonserver.log"
    ) as endpoints:
        served = ServedClasses(endpoints.grpc_url)
        points.append(checkpoint(served, truth, probes, endpoints.metrics_url, 0, 0))
        print(points[-1].row(), flush=True)
        done = 0
        for first in range(0, args.requests, args.batch):
            stop = min(first + args.batch, args.requests)
            replayed = replay(endpoints.grpc_url, batch_of(trace, first, stop), requests[first:stop])
            done += replayed.tally.completed
            time.sleep(settle_s)
            points.append(checkpoint(served, truth, probes, endpoints.metrics_url, stop, done))
            print(points[-1].row(), flush=True)
    reached = next((c.sent for c in points if c.agreement >= AGREED), None)
    print(
        f"first reached {AGREED:.0%} at {reached} requests"
        if reached is not None
        else f"{AGREED:.0%} not reached"
    )
    print(f"{len(points) - 1} batches in {time.monotonic() - started:.0f} s with the server up")
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "reached_at": reached}
    result["checkpoints"] = [asdict(c) for c in points]
    (work / "convergence.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
