"""The online cost model on a real server: started from the H100 reference fit, it refits from the tiny
model's observed prefills while every request is answered, the metrics endpoint shows it, and
`rps-serve classify --url` answers with it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rps_harness.client import ServedClasses
from rps_harness.loadtest.server_stats import MetricsSnapshot, ServedFit
from rps_serve.cost.online import OnlineOptions
from rps_serve.cost.runtime import REPORT_FILE
from rps_serve.cost.training import fit_of_report
from rps_serve.requests import Modality
from tests.e2e.triton.conftest import PROBES, VLLM_MODEL, Requests, Server, metrics, run, start_server

ONLINE = OnlineOptions(interval_s=1.0, min_new_records=10, min_records=4)
REQUESTS = 60


@pytest.fixture(scope="module")
def online_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    setting = {
        "interval_s": ONLINE.interval_s,
        "min_new_records": ONLINE.min_new_records,
        "min_records": ONLINE.min_records,
    }
    with start_server(tmp_path_factory, settings={"cost_model_online": setting}) as running:
        yield running


def test_the_fit_follows_the_served_model_and_the_endpoint_shows_it(online_server: Server) -> None:
    reference, _ = fit_of_report(json.loads((online_server.repository / REPORT_FILE).read_text()))
    requests = Requests(seed=7)
    load = [requests.make(list(Modality)[i % 3], max_tokens=2) for i in range(REQUESTS)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda g: run(online_server, "rps_ensemble", g), load))
    assert [r.error for r in results] == [None] * REQUESTS

    now = _settled(online_server)
    fit = ServedFit.of(now)
    assert fit is not None and fit.updates >= 1 and fit.observed >= ONLINE.min_new_records
    for modality in Modality:
        error = now.value("rps_cost_model_abs_error_seconds", model=VLLM_MODEL, modality=modality.value)
        assert error is not None and error >= 0
    # The tiny model on a CPU is not LLaVA-7B on an H100.
    assert any(fit.lines[m].slope != reference[m].slope for m in Modality)

    # `rps-serve classify --url` answers with the fit the metrics show, not the repository's.
    asked = ServedClasses(online_server.endpoints.grpc_url).assess(PROBES)
    for probe, verdict in zip(PROBES, asked, strict=True):
        expected = fit.lines[probe.modality].seconds(probe.prompt_tokens)
        assert verdict.estimate.prefill_s == pytest.approx(expected, rel=1e-4, abs=1e-6), probe
    assert metrics(online_server).total("rps_cost_model_updates_total", model=VLLM_MODEL) == fit.updates
    # And it serves on with the fit it learned.
    assert run(online_server, VLLM_MODEL, requests.make(Modality.VIDEO, max_tokens=2)).error is None


def _settled(server: Server, timeout_s: float = 120) -> MetricsSnapshot:
    """The metrics once the refit has taken in every record of the load: at least one update, and no
    further one over a few intervals (records of the last requests can arrive after the first)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        now = metrics(server)
        updates = now.total("rps_cost_model_updates_total", model=VLLM_MODEL)
        if updates >= 1 and updates == last:
            return now
        assert time.monotonic() < deadline, f"the refit did not settle ({updates} updates)"
        last = updates
        time.sleep(3 * ONLINE.interval_s)
