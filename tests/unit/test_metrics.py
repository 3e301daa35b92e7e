"""Engine-neutral metrics on hand-made request records."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from rps_harness.metrics import RequestRecords, grouped_metrics, latency_metrics, slo_metrics, summary
from rps_serve.requests import Modality


def _records() -> RequestRecords:
    # text: ttft 0.1, 0.3; image: ttft 1.0; video: never finished.
    return RequestRecords(
        arrival_s=np.array([0.0, 1.0, 2.0, 3.0]),
        first_token_s=np.array([0.1, 1.3, 3.0, np.nan]),
        finish_s=np.array([1.1, 2.3, 4.0, np.nan]),
        output_tokens=np.array([11, 1, 5, 4]),
        modality=np.array([0, 0, 1, 2]),
        level=np.array([0, 0, 1, 2]),
    )


def test_summary_of_known_values() -> None:
    values = np.arange(1.0, 101.0)
    s = summary(values)
    assert s["mean"] == 50.5
    assert s["p50"] == 50.5 and s["p99"] == pytest.approx(99.01)
    assert set(s) == {"mean", "p50", "p90", "p95", "p99"}
    assert summary(np.array([np.nan]))["p99"] is None


def test_per_request_latencies() -> None:
    r = _records()
    assert np.allclose(r.ttft[:3], [0.1, 0.3, 1.0])
    assert np.allclose(r.e2e[:3], [1.1, 1.3, 2.0])
    assert r.tpot[0] == pytest.approx(1.0 / 10)
    assert np.isnan(r.tpot[1])  # one output token: no time per output token
    assert r.norm_latency[2] == pytest.approx(2.0 / 5)
    assert r.completed.tolist() == [True, True, True, False]


def test_groups() -> None:
    grouped = grouped_metrics(_records())
    assert grouped["by_modality"]["text"]["ttft"]["mean"] == pytest.approx(0.2)
    assert grouped["by_modality"]["video"]["ttft"]["mean"] is None
    assert grouped["by_class"]["pebbles"]["e2e"]["p50"] == pytest.approx(2.0)
    assert grouped["overall"]["count"] == 4
    assert set(latency_metrics(_records())) == {"ttft", "tpot", "e2e", "norm_latency", "count"}


def test_slo_goodput_and_severity() -> None:
    slo = {Modality.TEXT: 0.2, Modality.IMAGE: 0.5, Modality.VIDEO: 1.0}
    report = slo_metrics(_records(), slo, duration_s=4.0, scales=(1.0, 2.0))
    one = report["1x"]
    # Met at 1x: text 0.1 only. Late: text 0.3 (0.5 over), image 1.0 (1.0 over), video unfinished.
    assert one["goodput_rps"] == pytest.approx(1 / 4.0)
    assert one["violation_rate"] == pytest.approx(3 / 4)
    assert one["severity"] == pytest.approx((0.5 + 1.0) / 2)
    two = report["2x"]
    assert two["violation_rate"] == pytest.approx(1 / 4)  # only the unfinished video
    assert two["by_modality"]["text"] == 0.0 and two["by_modality"]["video"] == 1.0


def test_the_steady_state_leaves_out_ramp_up_and_drain() -> None:
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, 100, 1000))
    records = RequestRecords(
        arrival_s=rng.permutation(arrival),
        first_token_s=np.zeros(1000),
        finish_s=np.ones(1000),
        output_tokens=np.ones(1000, dtype=np.int64),
        modality=np.zeros(1000, dtype=np.int64),
        level=np.zeros(1000, dtype=np.int64),
    )
    steady = records.steady_state(trim=0.1)
    kept = records.select(steady)
    assert abs(len(kept.arrival_s) - 800) <= 2
    assert kept.arrival_s.min() >= arrival[99] and kept.arrival_s.max() <= arrival[900]
    outside = (records.arrival_s < kept.arrival_s.min()) | (records.arrival_s > kept.arrival_s.max())
    assert np.array_equal(~steady, outside)
    # A longer warm-up moves only the window's start; none that leaves no window is taken.
    later = records.select(records.steady_state(trim=0.1, warm_up=0.3))
    assert abs(len(later.arrival_s) - 600) <= 2
    assert later.arrival_s.min() >= arrival[299] and later.arrival_s.max() == kept.arrival_s.max()
    with pytest.raises(ValueError, match="leaves no window"):
        records.steady_state(trim=0.1, warm_up=0.9)


def test_records_read_back_from_json_as_written() -> None:
    for records in (_records(), replace(_records(), kind=np.array([0, 1, 2, 3]), num_levels=5)):
        again = RequestRecords.from_json(json.loads(json.dumps(records.to_json())))
        assert again.num_levels == records.num_levels
        for name in ("arrival_s", "first_token_s", "finish_s", "output_tokens", "modality", "level"):
            expected, got = getattr(records, name), getattr(again, name)
            assert got.dtype.kind == expected.dtype.kind
            assert np.array_equal(got, expected, equal_nan=expected.dtype.kind == "f")
        assert (again.kind is None) == (records.kind is None)
        if records.kind is not None:
            assert np.array_equal(again.kind, records.kind)
