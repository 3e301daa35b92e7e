"""KV headroom: the heaviest class starts only where the reserve stays free after it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rps_serve.scheduling.admission import admits


def test_a_rock_keeps_the_reserve_free() -> None:
    # 100 blocks of 16 tokens, 5% reserve: a 160-token rock needs 10 blocks, a 161-token one 11.
    assert admits(2, 3, 160, free_blocks=15, total_blocks=100, block_size=16, reserve=0.05)
    assert not admits(2, 3, 160, free_blocks=14, total_blocks=100, block_size=16, reserve=0.05)
    assert not admits(2, 3, 161, free_blocks=15, total_blocks=100, block_size=16, reserve=0.05)


@given(
    level=st.integers(0, 1),
    tokens=st.integers(1, 10_000),
    free=st.integers(0, 1_000),
    reserve=st.floats(0.0, 0.5),
)
def test_lighter_classes_and_no_reserve_are_never_held_back(
    level: int, tokens: int, free: int, reserve: float
) -> None:
    assert admits(level, 3, tokens, free, 1_000, 16, reserve)
    assert admits(2, 3, tokens, free, 1_000, 16, 0.0)
