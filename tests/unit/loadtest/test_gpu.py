"""GPU utilization sampling: the time average, and the sampler on whatever this machine has."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rps_harness.loadtest.gpu import GpuSampler, time_average
from tests.hardware import HAS_NVIDIA_DRIVER


def test_time_average_weights_values_by_the_time_they_held() -> None:
    # 0 for 1 s then 1 for 3 s (linear in between samples): trapezoids give (0.5 * 1 + 1 * 3) / 4.
    assert time_average([0.0, 1.0, 4.0], [0.0, 1.0, 1.0]) == pytest.approx(3.5 / 4)
    # Uneven sampling does not bias the average towards densely sampled stretches.
    assert time_average([0.0, 0.1, 0.2, 10.0], [1.0, 1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert time_average([5.0], [0.25]) == 0.25
    assert time_average([], []) is None


def _sample() -> tuple[GpuSampler, dict[str, Any]]:
    with GpuSampler(interval_s=0.01) as gpu:
        time.sleep(0.1)
    return gpu, gpu.result().to_json()


@pytest.mark.skipif(not HAS_NVIDIA_DRIVER, reason="needs NVIDIA's driver")
def test_with_nvidia_driver_the_sampler_reports_a_fraction() -> None:
    gpu, report = _sample()
    result = gpu.result()
    assert result.unavailable is None
    assert result.devices >= 1 and result.samples >= 1
    assert 0.0 <= report["utilization"] <= 1.0


@pytest.mark.skipif(HAS_NVIDIA_DRIVER, reason="a machine without NVIDIA's driver")
def test_without_nvidia_driver_the_sampler_says_why_and_reports_null() -> None:
    gpu, report = _sample()
    result = gpu.result()
    assert report["utilization"] is None and result.samples == 0
    assert result.unavailable
