"""The longest-wait guarantees (docs/limits-and-guarantees.md), held by the simulator on every setting of
the policy table:
- relative: in every run, each class of the shipped policy, and of its light-step variant, waits at
  most 1.25x its longest under the better stock priority on the same trace, the heavier classes'
  margin stretched by the policy's light steps (`comparison.wait_checks`);
- absolute: in every run of the light-step variant, every request gets its first token within the
  bound its run's load and the floor's share give it (`service_bound`).
Shorter runs and fewer seeds than `make longest-wait` and `make policy-table`, so that it fails in the
unit tier the moment a change lets a class starve."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import pytest

from rps_harness.comparison import STOCK_PRIORITIES, wait_checks
from rps_harness.metrics import RequestRecords
from rps_harness.service_bound import class_bounds
from rps_harness.sim.run import bounded_run, light_stretch, prepare, run_policy
from rps_serve.scheduling.parameters import SHIPPED_POLICY
from tests.checkout import CHECKOUT

sys.path.insert(0, str(CHECKOUT / "benchmarks"))  # the benchmark scripts import each other by name
from h100_comparison import DEPLOYMENTS, SETTINGS, Comparison

REQUESTS = 800
SEEDS = (0, 1)
POLICIES = (SHIPPED_POLICY.value, "headroom-light")
# Where a policy breaks the guarantee on these runs: known, measured, and each one a failure the day it
# is fixed (strict). Under KV pressure on the 7B one sand request of seed 0 waited 2.70 s under
# headroom-light against 1.44 s under the better stock priority; on the 72B's mixed-i one pebble of
# seed 1 waited 4.32 s under headroom against 3.03 s. docs/limits-and-guarantees.md states both.
BROKEN = {("7B", "kv-pressure", "headroom-light"), ("72B", "mixed-i", "headroom")}
MODELS = dict(zip(DEPLOYMENTS, ("7B", "72B"), strict=True))
# A setting's runs by policy, and each candidate's light-step stretch.
Runs = tuple[dict[str, list[RequestRecords]], dict[str, float]]


@pytest.fixture(scope="module")
def runs_of(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, int, str], Runs]:
    """Every policy's runs of a setting (each seed's trace), and each candidate's light-step stretch:
    computed once a setting, for the tests of both candidates."""
    comparison = Comparison(REQUESTS, tmp_path_factory.mktemp("wait-bound"))

    @functools.cache
    def runs(
        reference: str, gpus: int, name: str
    ) -> tuple[dict[str, list[RequestRecords]], dict[str, float]]:
        setting = SETTINGS[name]
        rate = setting.load * comparison.capacity(reference, gpus, setting).rate
        records: dict[str, list[RequestRecords]] = {p: [] for p in (*POLICIES, *STOCK_PRIORITIES)}
        stretch: dict[str, float] = {}
        for seed in SEEDS:
            setup = prepare(comparison.config(reference, gpus, setting, rate, seed))
            for policy in records:
                records[policy].append(run_policy(setup, policy).records)
            stretch = {policy: light_stretch(setup, policy) for policy in POLICIES}
        return records, stretch

    return runs


CASES = [
    pytest.param(
        deployment,
        name,
        policy,
        id=f"{MODELS[deployment]}-{name}-{policy}",
        marks=[pytest.mark.xfail(strict=True)] if (MODELS[deployment], name, policy) in BROKEN else [],
    )
    for deployment in DEPLOYMENTS
    for name in SETTINGS
    for policy in POLICIES
]


@pytest.mark.slow
@pytest.mark.parametrize(("deployment", "name", "policy"), CASES)
def test_every_class_keeps_its_longest_wait_bound(
    runs_of: Callable[[str, int, str], Runs],
    deployment: tuple[str, int],
    name: str,
    policy: str,
) -> None:
    runs, stretch = runs_of(*deployment, name)
    stock = {p: runs[p] for p in STOCK_PRIORITIES}
    broken = [c for c in wait_checks(runs[policy], stock, stretch=stretch[policy]) if not c.holds]
    assert not broken, broken


LIGHT = "headroom-light"
# Where requests wait past the service bound: every one a run whose KV cache fills again after a
# request's service has begun (KV pressure; the 72B's overload, and one rock of its mixed-iv, where
# the KV reserve holds rocks), which the bound leaves out (`service_bound`). Measured on these runs,
# each a failure the day it holds (strict).
CACHE_BOUND = {("7B", "kv-pressure"), ("72B", "overload"), ("72B", "kv-pressure"), ("72B", "mixed-iv")}
BOUND_CASES = [
    pytest.param(
        deployment,
        name,
        id=f"{MODELS[deployment]}-{name}",
        marks=[pytest.mark.xfail(strict=True)] if (MODELS[deployment], name) in CACHE_BOUND else [],
    )
    for deployment in DEPLOYMENTS
    for name in SETTINGS
]


@pytest.mark.slow
@pytest.mark.parametrize(("deployment", "name"), BOUND_CASES)
def test_every_request_of_the_light_step_policy_keeps_its_service_bound(
    tmp_path_factory: pytest.TempPathFactory, deployment: tuple[str, int], name: str
) -> None:
    comparison = Comparison(REQUESTS, tmp_path_factory.mktemp("service-bound"))
    setting = SETTINGS[name]
    rate = setting.load * comparison.capacity(*deployment, setting).rate
    for seed in SEEDS:
        _, run = bounded_run(prepare(comparison.config(*deployment, setting, rate, seed)), LIGHT)
        assert run is not None, f"{LIGHT} has no light steps"
        broken = [c for c in class_bounds(run) if not c.holds]
        assert not broken, (seed, broken)
