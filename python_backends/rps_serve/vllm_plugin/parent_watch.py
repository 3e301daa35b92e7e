"""Ends a process and its descendants when its parent dies: vLLM's engine core, and `vllm_model`'s stub.

vLLM's workers follow their engine core down, but the engine core does not follow the process that
started it (the Triton stub, or any `AsyncLLM` user): a SIGKILLed stub leaves the engine core and its
workers running, holding memory and cores, re-parented to init. The scheduler runs inside the engine
core, so it starts this watch there. It polls `os.getppid()` rather than using `PR_SET_PDEATHSIG`,
which fires when the parent *thread* that forked the process ends (vLLM may start its engine from a
thread that is not the process's last).
`vllm_model` follows tritonserver the same way: Triton 2.51's stub checks its parent only between
health updates, and one blocked on a lock the dead server held never exits, keeping its engine alive.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time

import psutil

logger = logging.getLogger(__name__)

POLL_S = 0.5  # the engine core follows its parent within this


def watch_parent(poll_s: float = POLL_S) -> threading.Thread | None:
    """In a process started by `multiprocessing` (vLLM's engine core), `follow_parent`; elsewhere (an
    in-process engine, whose parent is the user's shell) do nothing and return None."""
    if multiprocessing.parent_process() is None:
        return None
    return follow_parent(poll_s)


def follow_parent(poll_s: float = POLL_S) -> threading.Thread:
    """Start a daemon thread that kills this process and its descendants once its parent is gone."""
    parent = os.getppid()
    thread = threading.Thread(target=_watch, args=(parent, poll_s), name="rps-parent-watch", daemon=True)
    thread.start()
    return thread


def _watch(parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    logger.error("process %d: its parent %d is gone; ending it and its children", os.getpid(), parent)
    kill_tree()


def kill_tree() -> None:
    """SIGKILL this process's descendants, then itself: with the parent gone, no one reads its work."""
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            continue
    os.kill(os.getpid(), signal.SIGKILL)
