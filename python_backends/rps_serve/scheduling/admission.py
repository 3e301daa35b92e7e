"""KV headroom: when a waiting request of the heaviest class may start.

Stock vLLM starts a waiting request whenever the KV cache holds its next chunk. A heavy request
started into a nearly full cache is the one vLLM preempts a few steps later, when the running requests
cannot grow (its prefill then computed again), and while it holds the last blocks the sand behind it
waits for KV. Under `PolicyRow.kv_reserve` a request of the heaviest class (a rock) starts only
where, once its prompt's blocks are taken, that share of the cache stays free: the headroom the
running requests grow into and the next lighter requests start in. The lighter classes are never
held back: held too, the pebbles (long texts among them) waited up to 2.3x longer than under stock
priority while sand took the blocks they waited for (docs/decisions.md). Both engines ask this at
the same point, with the queue's best request: before it is admitted, once the running requests have
taken this step's blocks; a request it turns away ends the step's admissions, as a request the cache
cannot hold ends them in vLLM.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

Tokens = TypeVar("Tokens", int, np.ndarray)


def kv_blocks(tokens: Tokens, block_size: int) -> Tokens:
    """The KV blocks that hold `tokens` (a count, or an array of counts): whole blocks, rounded up."""
    return -(-tokens // block_size)


def admits(
    level: int,
    num_levels: int,
    tokens: int,
    free_blocks: int,
    total_blocks: int,
    block_size: int,
    reserve: float,
) -> bool:
    """Whether a waiting request of class `level` (of `num_levels`) with `tokens` to compute may start
    now, with `free_blocks` of `total_blocks` free, keeping `reserve` (a share of the cache) free for
    lighter work when it is of the heaviest class."""
    if level < num_levels - 1 or reserve <= 0:
        return True
    return free_blocks - kv_blocks(tokens, block_size) >= reserve * total_blocks
