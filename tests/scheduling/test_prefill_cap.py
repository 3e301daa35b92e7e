"""Prefill cap: in-order allocation under a token budget and a cap on heavier prefill."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rps_serve.scheduling.parameters import Policy
from rps_serve.scheduling.prefill_cap import PrefillCap, allocate_in_order


def _greedy(pending: list[int], budget: int, capped: list[bool], cap: int | None) -> list[int]:
    granted = []
    for want, is_capped in zip(pending, capped, strict=True):
        tokens = min(want, budget)
        if is_capped and cap is not None:
            tokens = min(tokens, cap)
            cap -= tokens
        budget -= tokens
        granted.append(tokens)
    return granted


@given(
    st.lists(st.tuples(st.integers(1, 9000), st.booleans()), max_size=40),
    st.integers(0, 8192),
    st.none() | st.integers(0, 4096),
)
def test_allocation_matches_a_greedy_loop(
    requests: list[tuple[int, bool]], budget: int, cap: int | None
) -> None:
    pending = [p for p, _ in requests]
    capped = [c for _, c in requests]
    got = allocate_in_order(np.array(pending, dtype=np.int64), budget, np.array(capped, dtype=bool), cap)
    assert got.tolist() == _greedy(pending, budget, capped, cap)


def test_cap_only_for_class_aware_policies_and_only_while_sand_is_pending() -> None:
    assert PrefillCap.for_policy(Policy.FCFS) is None
    cap = PrefillCap.for_policy(Policy.RPS, heavy_tokens=1024)
    assert cap is not None
    assert cap.heavy_budget(sand_pending=True) == 1024
    assert cap.heavy_budget(sand_pending=False) is None
