"""`rps-serve soak` in small over the real server."""

from __future__ import annotations

from rps_harness.loadtest.soak import SoakConfig, run_soak
from rps_harness.workload.request_format import RequestFormat
from tests.e2e.triton.conftest import Server


def test_short_overload_soak(server: Server) -> None:
    """`rps-serve soak` in small: the rate measured closed-loop, then two cycles of 1.5x it for 22 s
    each, each followed by the drain; memory after the second drain against that after the first."""
    config = SoakConfig(duration_s=44, cycles=2, calibrate_s=15, calibrate_concurrency=8, sample_s=2, seed=3)
    report = run_soak(server.endpoints, RequestFormat.of_model(server.model), config)
    print(report.to_json())
    for cycle in report.cycles:
        assert cycle.sent >= 5
        assert cycle.completed + cycle.rejected + cycle.errors == cycle.sent
        assert cycle.errors == 0, cycle.error_examples
        assert set(cycle.rss_drained_by_process) >= {"tritonserver", "stub vllm_model"}
        assert set(cycle.shm_drained_by_stub) >= {"stub preprocess", "stub vllm_model"}
    assert report.failures() == []
