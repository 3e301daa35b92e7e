"""The simulated front end: a worker pool in arrival order, or in class order as `vllm_model`'s."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rps_harness.sim.frontend import PreprocessCosts, worker_pool
from rps_serve.triton.settings import SETTINGS_FILE
from tests.checkout import REPOSITORY


def test_one_worker_in_arrival_order_queues_each_job_behind_the_earlier_ones() -> None:
    done, busy = worker_pool(np.array([0.0, 0.1, 0.2]), np.array([1.0, 0.5, 0.25]), workers=1)
    assert done.tolist() == pytest.approx([1.0, 1.5, 1.75])
    assert busy == pytest.approx(1.75)


def test_two_workers_share_the_queue() -> None:
    done, _ = worker_pool(np.array([0.0, 0.0, 0.0]), np.array([1.0, 2.0, 1.0]), workers=2)
    assert done.tolist() == pytest.approx([1.0, 2.0, 2.0])


def test_class_order_lets_a_light_job_overtake_queued_heavy_ones() -> None:
    # A video occupies the worker; two more videos and then a text queue behind it.
    ready = np.array([0.0, 0.1, 0.2, 0.3])
    service = np.array([1.0, 1.0, 1.0, 0.1])
    levels = np.array([2, 2, 2, 0])
    by_arrival, _ = worker_pool(ready, service, workers=1)
    by_class, _ = worker_pool(ready, service, workers=1, levels=levels)
    assert by_arrival[3] == pytest.approx(3.1)
    assert by_class[3] == pytest.approx(1.1)  # next after the video in progress: no preemption
    assert by_class[1:3].tolist() == pytest.approx([2.1, 3.1])


def test_an_idle_worker_waits_for_the_next_arrival_and_free_jobs_pass_through() -> None:
    done, _ = worker_pool(np.array([0.0, 5.0, 6.0]), np.array([1.0, 0.0, 1.0]), workers=1)
    assert done.tolist() == pytest.approx([1.0, 5.0, 7.0])


def test_the_default_front_end_has_the_servers_workers() -> None:
    settings = json.loads((REPOSITORY / SETTINGS_FILE).read_text())
    assert PreprocessCosts().workers == settings["front_end_workers"]
