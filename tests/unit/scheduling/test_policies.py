"""The policies' behaviour table: every policy has a row, and the rows say what the baselines are."""

from __future__ import annotations

from rps_serve.scheduling.parameters import POLICY_TABLE, Order, Policy
from rps_serve.scheduling.preemption import PreemptionRule


def test_every_policy_has_a_row() -> None:
    assert set(POLICY_TABLE) == set(Policy)


def test_the_baselines_run_on_stock_vllm_and_never_evict_for_a_waiting_request() -> None:
    for policy in Policy:
        row = policy.row
        assert row.stock == (policy in (Policy.FCFS, Policy.VLLM_PRIORITY, Policy.MODALITY_PRIORITY))
        if row.stock:
            assert PreemptionRule.for_policy(policy) is None
        assert row.vllm_policy == ("fcfs" if policy is Policy.FCFS else "priority")
        assert row.by_class == (row.order is not Order.ARRIVAL)


def test_the_stock_priorities_are_vllms_priority_policy_by_class_or_by_modality() -> None:
    stock = {policy for policy in Policy if policy.is_stock_priority}
    assert stock == {Policy.VLLM_PRIORITY, Policy.MODALITY_PRIORITY}
    assert all(policy.row.vllm_policy == "priority" and policy.is_stock for policy in stock)
