"""Ends a process and its descendants when its parent dies: vLLM's engine core, and `vllm_model`'s stub.

vLLM's workers follow their engine core down, but the engine core does not follow the process that
started it (the Triton stub, or any `AsyncLLM` user): a SIGKILLed stub leaves the engine core and its
workers running, holding memory and cores, re-parented to init. The scheduler runs inside the engine
core, so it starts a watch thread there. It polls `os.getppid()` rather than using `PR_SET_PDEATHSIG`,
which fires when the parent *thread* that forked the process ends (vLLM may start its engine from a
thread that is not the process's last).

`vllm_model` follows tritonserver too, but not from a thread of its own: Triton 2.51's stub checks its
parent only between health updates, and once the server is gone any thread that reaches the server
(a response, a log record through `pb_utils.Logger`) can block for good, holding the interpreter with
it (no later python_backend release we read, up to r26.07, changes that check; kept on 26.10).
So the stub starts a watcher process that reads the stub's parent from `/proc` and ends the stub's
tree from outside, needing nothing from the stub. The watcher also outlives a stub that dies on its
own (SIGKILL, the OOM killer): it keeps a list of the stub's descendants and ends those the stub
left. The stock-vLLM engines a stub serves as baselines need it, as their engine cores run no RPS
scheduler and so no watch of their own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized

import psutil

from rps_serve.process_tree import process_tree

POLL_S = 0.5  # a watched process follows its parent within this
READY_S = 60.0  # the longest a stub waits for its watcher's first look (a spawn imports Python)


def watch_parent(poll_s: float = POLL_S) -> threading.Thread | None:
    """In a process started by `multiprocessing` (vLLM's engine core), follow its parent from a daemon
    thread; elsewhere (an in-process engine, whose parent is the user's shell) do nothing, return None."""
    if multiprocessing.parent_process() is None:
        return None
    args = (os.getpid(), os.getppid(), poll_s, False)
    thread = threading.Thread(target=_watch, args=args, name="rps-parent-watch", daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class ParentWatcher:
    """A watcher process and its count of looks at the watched process's descendants."""

    process: multiprocessing.process.BaseProcess
    looks: Synchronized[int]

    def wait_for_a_look(self, timeout_s: float = READY_S) -> bool:
        """Return once the watcher has taken a whole look that began after this call (so it knows
        every descendant started before the call), or False after `timeout_s` or once it has ended."""
        # The look under way when `looks` is read may have begun before the call; the next one has not.
        return self.wait_for_looks(self.looks.value + 2, timeout_s)

    def wait_for_looks(self, count: int, timeout_s: float = READY_S) -> bool:
        """Return once the watcher has taken `count` looks in all, or False after `timeout_s` or once
        it has ended."""
        deadline = time.monotonic() + timeout_s
        while self.looks.value < count:
            if not self.process.is_alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True


def start_parent_watcher(poll_s: float = POLL_S) -> ParentWatcher:
    """Start a watcher process that ends this process and its descendants once this process's parent
    is gone, and the descendants this process leaves if it dies first. Daemonic, so that a normal
    exit of this process ends it too. Returns once the watcher has taken its first look (or after
    `READY_S`): a spawned watcher takes a while to start, and children this process started and left
    before that look would be missed. A child started later is known to the watcher once
    `wait_for_a_look` returns."""
    context = multiprocessing.get_context("spawn")
    looks = context.Value("Q", 0)
    process = context.Process(
        target=_watch,
        args=(os.getpid(), os.getppid(), poll_s, True, looks),
        name="rps-parent-watch",
        daemon=True,
    )
    process.start()
    watcher = ParentWatcher(process, looks)
    if not watcher.wait_for_looks(1):  # the first look began after this process's children started
        _say(f"the watcher of process {os.getpid()} has not started after {READY_S:.0f} s; going on")
    return watcher


def _watch(
    watched: int, parent: int, poll_s: float, end_orphans: bool, looks: Synchronized[int] | None = None
) -> None:
    """Until `watched`'s parent is no longer `parent`, then end `watched`'s tree (from a thread of
    `watched` itself or from another process alike). If `watched` ends first: with `end_orphans`
    (a watcher in another process), end the descendants it left, as last seen; else return. `looks`
    counts the looks taken."""
    left: list[psutil.Process] = []
    while (current := parent_of(watched)) == parent:
        if end_orphans:
            left = process_tree(watched)[1:] or left
        if looks is not None:
            looks.value += 1
        time.sleep(poll_s)
    if current is not None:
        _say(f"process {watched}: its parent {parent} is gone; ending it and its children")
        kill_tree(watched)
    elif left:
        _say(f"process {watched} has ended; ending the processes it left")
        _kill(left)


def parent_of(pid: int) -> int | None:
    """The parent of `pid` as the kernel has it, or None once `pid` has ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, ppid = fields[0], int(fields[1])
    return None if state in (b"Z", b"X") else ppid


def kill_tree(root: int) -> None:
    """SIGKILL `root`'s descendants, then `root`: with its parent gone, no one reads their work. The
    caller, if among the descendants, goes last."""
    _kill(process_tree(root)[1:])
    with contextlib.suppress(ProcessLookupError):
        os.kill(root, signal.SIGKILL)


def _kill(processes: list[psutil.Process]) -> None:
    """SIGKILL each of `processes` but the caller; psutil skips one whose PID a new process took."""
    for process in processes:
        if process.pid != os.getpid():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


def _say(message: str) -> None:
    """Write `message` to stderr directly: logging may route through the dead server and block."""
    with contextlib.suppress(OSError):
        os.write(2, f"rps_serve parent watch: {message}\n".encode())
