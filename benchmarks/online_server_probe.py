"""The online refit on a real server, as the issue's acceptance asks: tritonserver on a copy of the
repository whose cost model is the H100 reference's, `cost_model_online` on, serving the tiny model;
a few hundred mixed requests through `rps_ensemble`; then how the server classes a fixed probe grid
(`rps-serve classify --url`, asking `vllm_model`) against the cost model the repository was trained
with on the served model's profile, before the load and after it, and the updates the metrics show.

    .venv/bin/python benchmarks/online_server_probe.py --requests 300 --rate 2 --out out/online-probe
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rps_harness.client import ServedClasses
from rps_harness.loadtest.replay import build_requests, replay
from rps_harness.loadtest.server_stats import ServedFit, scrape
from rps_harness.local.checkout import REPOSITORY, TINY_MODEL
from rps_harness.local.repository import online_refit_copy, train_reference_cost_models
from rps_harness.local.server import EngineSettings, launch_server
from rps_harness.sim.online import probe_grid
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.source import SyntheticWorkload
from rps_serve.cost.model import agreement, agreement_by_modality
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

CONTENT = ContentLimits(max_text_tokens=4096, max_output_tokens=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=TINY_MODEL)
    parser.add_argument("--profile-trained", type=Path, default=REPOSITORY, help="the served model's fit")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument(
        "--interval-s", type=float, default=5.0, help="the refit's cost_model_online interval"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("out/online-probe"))
    args = parser.parse_args()

    work = args.out.resolve()
    repository = online_refit_copy(work, args.interval_s)
    train_reference_cost_models(repository)
    configure_cpu_engine_environment(work / "vllm")

    probes = probe_grid()
    profile_trained = OnnxCostModel.from_repository(args.profile_trained)
    workload = SyntheticWorkload("mixed-iii", args.rate, args.requests, args.seed)
    trace = workload.trace()
    requests = build_requests(trace, RequestFormat.of_model(args.model), CONTENT, args.seed)
    with launch_server(
        repository, work / "server", EngineSettings(model=args.model), work / "tritonserver.log"
    ) as endpoints:
        before = agreement(ServedClasses(endpoints.grpc_url), profile_trained, probes)
        replayed = replay(endpoints.grpc_url, trace, requests)
        time.sleep(2 * args.interval_s)  # the last records reach the fit within an interval or two
        fit = ServedFit.of(scrape(endpoints.metrics_url))
        served = ServedClasses(endpoints.grpc_url)
        after = agreement(served, profile_trained, probes)
        by_modality = agreement_by_modality(served, profile_trained, probes)
    print(f"{replayed.tally}")
    print(f"probe grid ({len(probes)} requests) classed as the profile fit: {before:.0%} before the load,")
    print(f"{after:.0%} after it: " + ", ".join(f"{m} {a:.0%}" for m, a in by_modality.items()))
    if fit is not None:
        print(
            f"metrics: {fit.updates} updates, {fit.observed} prefills observed, "
            f"boundaries moved {fit.boundary_updates} times; lines "
            + ", ".join(
                f"{m.value} {line.intercept:.4f} s + {line.slope * 1e3:.4f} ms/token"
                for m, line in fit.lines.items()
            )
        )


if __name__ == "__main__":
    main()
