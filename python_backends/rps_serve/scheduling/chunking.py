"""Prefill chunk cap: keeps heavy prefills from filling a step while lighter requests wait."""

from __future__ import annotations

from collections.abc import Iterable


def prefill_chunk_cap(
    waiting_levels: Iterable[int], prefilling_levels: Iterable[int], cap_tokens: int
) -> int:
    """Tokens a prefill may put into the next step; 0 means no cap.

    A step's duration grows with the tokens in it, and a waiting request's first token waits for the
    steps ahead of it. While a request of a lighter class waits behind a running prefill of a heavier
    class, capping prefill chunks at `cap_tokens` keeps those steps short (chunk boundaries are
    scheduling points), so the light request is admitted sooner. No light request waiting: no cap.
    """
    if cap_tokens <= 0:
        return 0
    lightest_waiting = min(waiting_levels, default=None)
    heaviest_prefill = max(prefilling_levels, default=None)
    if lightest_waiting is None or heaviest_prefill is None or lightest_waiting >= heaviest_prefill:
        return 0
    return cap_tokens
