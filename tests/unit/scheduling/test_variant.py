"""A scheduling variant builds each engine's regulator, eviction rule, decode holds and rank times from one
value, and a server runs it where the plug-in's settings express it."""

from __future__ import annotations

import math

import pytest

from rps_harness.sim.simulator import policy_variant, served_names, served_settings
from rps_serve.scheduling.parameters import COST_ORDER, Policy, class_ladder
from rps_serve.scheduling.preemption import PreemptionRule
from rps_serve.scheduling.variant import SchedulingVariant
from rps_serve.vllm_plugin.config import CONFIG_KEY, RPSConfig


@pytest.mark.parametrize("policy", list(Policy))
def test_each_policy_evicts_by_its_row(policy: Policy) -> None:
    assert SchedulingVariant(policy, max_preemptions=3).preemption_rule() == PreemptionRule.for_policy(
        policy, 3
    )
    assert SchedulingVariant(policy).regulator(class_ladder(3)).policy is policy


def test_decode_holds_only_under_a_class_order_with_a_hold() -> None:
    holds = SchedulingVariant(Policy.HEADROOM, decode_hold_s=0.5).decode_holds(2.0, 3)
    assert holds is not None and holds.max_hold_s == 1.0  # on a clock twice the paper's
    assert SchedulingVariant(Policy.HEADROOM).decode_holds(2.0, 3) is None
    assert SchedulingVariant(Policy.FCFS, decode_hold_s=0.5).decode_holds(2.0, 3) is None


def test_the_plug_ins_settings_and_the_simulators_row_are_one_value() -> None:
    settings = {"policy": "rps", "chunk_cap_tokens": 256, "decode_hold_s": 0.25, "max_preemptions": 1}
    served = RPSConfig.from_additional_config({CONFIG_KEY: settings}).variant
    assert served == SchedulingVariant(
        Policy.RPS, max_preemptions=1, chunk_cap_tokens=256, decode_hold_s=0.25
    )
    assert policy_variant("headroom").scheduling == RPSConfig(policy=Policy.HEADROOM).variant


def test_a_cost_order_ranks_a_request_its_factor_times_its_prefill_after_its_arrival() -> None:
    cost_order = SchedulingVariant(Policy.HEADROOM, cost_order=20.0)
    assert cost_order.rank_time(100.0, 0.25) == 105.0
    assert cost_order.rank_time(100.0, math.nan) == 100.0  # no estimate (classes by modality)
    assert SchedulingVariant(Policy.HEADROOM).rank_time(100.0, 0.25) == 100.0
    # Stock vLLM cannot order by cost, and FCFS orders by arrival alone.
    for policy in (Policy.VLLM_PRIORITY, Policy.MODALITY_PRIORITY, Policy.FCFS):
        assert SchedulingVariant(policy, cost_order=20.0).rank_time(100.0, 0.25) == 100.0


def test_the_cost_order_setting_reaches_both_engines() -> None:
    served = RPSConfig.from_additional_config({CONFIG_KEY: {"policy": "headroom", "cost_order": 20}}).variant
    assert served == policy_variant("headroom-cost").scheduling


def test_a_server_runs_a_variant_its_settings_express_and_refuses_one_they_do_not() -> None:
    assert served_settings("headroom-cost") == (Policy.HEADROOM, {"cost_order": COST_ORDER})
    assert served_settings("modality-priority") == (Policy.MODALITY_PRIORITY, {})
    for name in ("rps-no-evict", "modserve", "rps-naive"):
        with pytest.raises(ValueError, match="do not express"):
            served_settings(name)
    assert "headroom-cost" in served_names() and "rps-no-evict" not in served_names()
