"""An engine-core-like process (started by multiprocessing) ends with its workers when its parent dies,
and so does a stub-like process whose interpreter is stuck, through its watcher process; a stub that
dies on its own takes down, through its watcher, the children it leaves."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from rps_serve.vllm_plugin.parent_watch import watch_parent

# The stub stands in as a launcher that starts the "engine core" through multiprocessing, as AsyncLLM
# does; the engine core starts a "worker" (a plain child) and the parent watch, then waits forever.
LAUNCHER = textwrap.dedent(
    """
    import multiprocessing, subprocess, sys, json, time
    from rps_serve.vllm_plugin.parent_watch import watch_parent

    def engine_core(out):
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        assert watch_parent(poll_s=0.1) is not None
        with open(out, "w") as f:
            json.dump({"engine_core": multiprocessing.current_process().pid, "worker": worker.pid}, f)
        time.sleep(120)

    if __name__ == "__main__":
        multiprocessing.get_context("spawn").Process(target=engine_core, args=(sys.argv[1],)).start()
        time.sleep(120)
    """
)


# A "server" starts a "stub" that starts its watcher and a "worker", then blocks in a C call that holds
# the interpreter (as a stub blocked on the dead server can): no thread of its own could end it.
SERVER = textwrap.dedent(
    """
    import subprocess, sys, time
    subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]])
    time.sleep(120)
    """
)
STUB = textwrap.dedent(
    """
    import ctypes, json, os, subprocess, sys
    from rps_serve.vllm_plugin.parent_watch import start_parent_watcher

    if __name__ == "__main__":
        watcher = start_parent_watcher(poll_s=0.1)  # returns once the watcher has looked
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        assert watcher.wait_for_a_look()  # the watcher knows the worker
        with open(sys.argv[1], "w") as f:
            json.dump({"stub": os.getpid(), "watcher": watcher.process.pid, "worker": worker.pid}, f)
        ctypes.PyDLL(None).sleep(120)  # libc's sleep, called without releasing the GIL
    """
)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pids_once_written(out: Path, launcher: subprocess.Popen[bytes]) -> dict[str, int]:
    deadline = time.monotonic() + 60
    while not out.exists() or not out.read_text():
        assert time.monotonic() < deadline and launcher.poll() is None, "the processes did not start"
        time.sleep(0.1)
    time.sleep(0.2)  # the file is complete once written and closed
    pids: dict[str, int] = json.loads(out.read_text())
    return pids


def _end_within(pids: dict[str, int], bound_s: float) -> list[str]:
    """The names in `pids` of processes still running `bound_s` from now (at most)."""
    deadline = time.monotonic() + bound_s
    while any(_running(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [name for name, pid in pids.items() if _running(pid)]


def _kill_left(pids: dict[str, int]) -> None:
    for pid in pids.values():
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_engine_core_and_its_workers_end_with_their_parent(tmp_path: Path) -> None:
    script, out = tmp_path / "launcher.py", tmp_path / "pids.json"
    script.write_text(LAUNCHER)
    launcher = subprocess.Popen([sys.executable, str(script), str(out)])
    pids: dict[str, int] = {}
    try:
        pids = _pids_once_written(out, launcher)
        assert _running(pids["engine_core"]) and _running(pids["worker"])
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        assert not _end_within(pids, 10.0)
    finally:
        launcher.kill()
        launcher.wait()
        _kill_left(pids)


@contextlib.contextmanager
def _server_and_stub(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int]]]:
    """A running "server" and the pids of its stuck "stub", the stub's watcher and its "worker";
    whatever is left of them is killed on the way out."""
    server_script, stub_script, out = tmp_path / "server.py", tmp_path / "stub.py", tmp_path / "pids.json"
    server_script.write_text(SERVER)
    stub_script.write_text(STUB)
    server = subprocess.Popen([sys.executable, str(server_script), str(stub_script), str(out)])
    pids: dict[str, int] = {}
    try:
        pids = _pids_once_written(out, server)
        assert all(_running(pid) for pid in pids.values())
        yield server, pids
    finally:
        server.kill()
        server.wait()
        _kill_left(pids)


def test_a_stuck_stub_and_its_children_end_with_its_parent(tmp_path: Path) -> None:
    with _server_and_stub(tmp_path) as (server, pids):
        os.kill(server.pid, signal.SIGKILL)
        server.wait()  # reaped, as an init does: only then is the stub re-parented
        assert not _end_within(pids, 10.0)


def test_the_children_of_a_killed_stub_end_while_its_server_lives(tmp_path: Path) -> None:
    # The "worker" stands in for a stock-vLLM engine core, which has no watch of its own.
    with _server_and_stub(tmp_path) as (server, pids):
        os.kill(pids["stub"], signal.SIGKILL)
        assert not _end_within({"worker": pids["worker"]}, 10.0)
        assert server.poll() is None


def test_no_watch_outside_a_multiprocessing_child() -> None:
    # This test process was not started by multiprocessing: an in-process engine must not kill it.
    assert watch_parent() is None
