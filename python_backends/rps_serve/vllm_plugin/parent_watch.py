"""Ends vLLM's engine-core process, and the workers it started, when the process that started it dies.

vLLM's workers follow their engine core down, but the engine core does not follow the process that
started it (the Triton stub, or any `AsyncLLM` user): a SIGKILLed stub leaves the engine core and its
workers running, holding memory and cores, re-parented to init. The scheduler runs inside the engine
core, so it starts this watch there. It polls `os.getppid()` rather than using `PR_SET_PDEATHSIG`,
which fires when the parent *thread* that forked the process ends (vLLM may start its engine from a
thread that is not the process's last).
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
    """In a process started by `multiprocessing` (vLLM's engine core), start a daemon thread that kills
    this process and its descendants once its parent is gone; elsewhere (an in-process engine, whose
    parent is the user's shell) do nothing and return None."""
    if multiprocessing.parent_process() is None:
        return None
    parent = os.getppid()
    thread = threading.Thread(target=_watch, args=(parent, poll_s), name="rps-parent-watch", daemon=True)
    thread.start()
    return thread


def _watch(parent: int, poll_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(poll_s)
    logger.error("engine core: its parent process %d is gone; ending it and its workers", parent)
    kill_tree()


def kill_tree() -> None:
    """SIGKILL this process's descendants, then itself: with the parent gone, no one reads its work."""
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            continue
    os.kill(os.getpid(), signal.SIGKILL)
