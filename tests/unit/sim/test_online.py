"""The online refit in the simulator: from a fit wrong for the device, the classes a trace gets at
arrival come to agree with the device's own fit, and the simulated RPS run pays for them meanwhile."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rps_harness.sim.online import Observation, arrivals_until_agreed, online_levels, probe_grid
from rps_harness.sim.run import SimulationConfig, class_levels, device_profile
from rps_harness.sim.timing import fit_lines
from rps_harness.workload.source import SyntheticWorkload
from rps_harness.workload.synthetic_profile import reference_profile, with_slower_images
from rps_serve.cost.online import OnlineCostModel, OnlineOptions
from rps_serve.cost.training import TrainingOptions, fit_cost_model
from rps_serve.profiles.reference import DEFAULT_REFERENCE


@pytest.mark.slow
def test_the_classes_converge_to_the_devices_own_fit() -> None:
    workload = SyntheticWorkload("mixed-iii", 1.0, 1200, seed=0)
    deployment, records = device_profile(
        SimulationConfig(gpus=1, workload=workload, reference=DEFAULT_REFERENCE)
    )
    records = with_slower_images(records, 20.0)
    deployment = replace(deployment, lines=fit_lines(records))
    training = TrainingOptions()
    truth = fit_cost_model(records, training)
    reference = reference_profile(DEFAULT_REFERENCE)
    start = fit_cost_model(reference, training)
    population = [r.features for r in reference]
    model = OnlineCostModel.from_fit(start, training, OnlineOptions(enabled=True), population)
    trace = workload.trace()
    online = online_levels(trace, deployment, model, truth, probe_grid(), Observation())

    assert online.start_agreement < 0.9  # a wrong start, or the test shows nothing
    true_levels = class_levels(trace, truth)
    settled = arrivals_until_agreed(online.levels, true_levels, 0.9, window=200)
    assert settled is not None and settled < len(trace) // 2
    agreed = online.levels == true_levels
    assert agreed[-len(trace) // 3 :].mean() >= 0.95
    assert agreed[:100].mean() < 0.9  # before the first updates, the start's classes
    # Each request was classed once, at arrival, with the fit then: the first ones with the start's.
    first_update = online.updates[0].arrived
    assert (online.levels[:first_update] == class_levels(trace, start)[:first_update]).all()


def test_arrivals_until_agreed_counts_to_the_window_after_which_they_stay_agreed() -> None:
    truth = np.zeros(1000, dtype=np.int64)
    levels = truth.copy()
    assert arrivals_until_agreed(levels, truth, window=100) == 0
    levels[:300:2] = 1  # the first 300 half wrong
    levels[500] = 1  # one more later: windows with it still agree at 99%
    assert (
        arrivals_until_agreed(levels, truth, window=100) == 279
    )  # windows from 279 on hold 10 wrong or fewer
    levels[-50:] = 1
    assert arrivals_until_agreed(levels, truth, window=100) is None
