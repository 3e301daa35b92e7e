"""A process and its descendants, as one list: what the parent watch kills, the benchmarks' placement
moves and measures, and the local launcher searches for shared memory."""

from __future__ import annotations

import psutil


def process_tree(pid: int) -> list[psutil.Process]:
    """Process `pid` first, then its descendants; none once `pid` has ended."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
