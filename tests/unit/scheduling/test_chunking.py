"""Prefill chunk cap: on only while a lighter class waits behind a heavier running prefill."""

from __future__ import annotations

import pytest

from rps_serve.scheduling.chunking import prefill_chunk_cap


@pytest.mark.parametrize(
    ("waiting", "prefilling", "cap"),
    [
        ([0], [2], 512),  # sand waits behind a rock's prefill: capped
        ([1], [0, 2], 512),  # a pebble waits behind a rock's prefill: capped
        ([0], [], 0),  # nothing is prefilling
        ([], [2], 0),  # nothing waits
        ([1], [1], 0),  # the same class
        ([2], [0, 1], 0),  # a heavier class waits behind lighter prefills
    ],
)
def test_cap_only_while_a_lighter_class_waits(waiting: list[int], prefilling: list[int], cap: int) -> None:
    assert prefill_chunk_cap(waiting, prefilling, 512) == cap


def test_a_zero_cap_is_off() -> None:
    assert prefill_chunk_cap([0], [2], 0) == 0
