"""An engine-core-like process (started by multiprocessing) ends with its workers when its parent dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
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


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_engine_core_and_its_workers_end_with_their_parent(tmp_path: Path) -> None:
    script, out = tmp_path / "launcher.py", tmp_path / "pids.json"
    script.write_text(LAUNCHER)
    launcher = subprocess.Popen([sys.executable, str(script), str(out)])
    try:
        deadline = time.monotonic() + 60
        while not out.exists() or not out.read_text():
            assert time.monotonic() < deadline and launcher.poll() is None, "engine core did not start"
            time.sleep(0.1)
        time.sleep(0.2)  # the file is complete once written and closed
        pids = json.loads(out.read_text())
        assert _running(pids["engine_core"]) and _running(pids["worker"])
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [name for name, pid in pids.items() if _running(pid)]
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_no_watch_outside_a_multiprocessing_child() -> None:
    # This test process was not started by multiprocessing: an in-process engine must not kill it.
    assert watch_parent() is None
