"""Reading a server's Prometheus metrics: the exposition format as Triton serves it, over HTTP."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from rps_harness.loadtest.server_stats import scrape

EXPOSITION = """\
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="vllm_model",version="1"} 12
nv_inference_count{model="preprocess",version="1"} 14
# HELP rps_requests_total Requests handed to the engine
# TYPE rps_requests_total counter
rps_requests_total{model="vllm_model",rps_class="sand",version="1"} 3
rps_requests_total{model="vllm_model",rps_class="rocks",version="1"} 2
# HELP rps_kv_cache_usage KV cache in use
# TYPE rps_kv_cache_usage gauge
rps_kv_cache_usage{model="vllm_model",version="1"} 0.25
# HELP nv_label_escapes gauge with an escaped label
# TYPE nv_label_escapes gauge
nv_label_escapes{path="a \\"quoted\\" name"} 1e-3
"""


@pytest.fixture(scope="module")
def metrics_url() -> Iterator[str]:
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = EXPOSITION.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


def test_totals_sum_the_series_whose_labels_match(metrics_url: str) -> None:
    snapshot = scrape(metrics_url)
    assert snapshot.total("rps_requests_total", model="vllm_model") == 5
    assert snapshot.total("rps_requests_total", rps_class="rocks") == 2
    assert snapshot.total("rps_requests_total", model="preprocess") == 0
    assert snapshot.total("rps_kv_cache_usage", model="vllm_model") == 0.25


def test_values_need_the_exact_labels_and_counters_end_in_total(metrics_url: str) -> None:
    snapshot = scrape(metrics_url)
    assert snapshot.value("nv_inference_count_total", model="preprocess", version="1") == 14
    assert snapshot.value("nv_inference_count_total", model="preprocess") is None
    assert snapshot.value("nv_label_escapes", path='a "quoted" name') == pytest.approx(1e-3)
