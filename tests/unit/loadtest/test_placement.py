"""Where a benchmark's processes run: the engine's worker on its own core, the rest on the others,
and what each process used."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from rps_harness.loadtest.placement import Placement, process_usage, usage_during

needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


@needs_two_cores
def test_the_engine_gets_the_last_core_and_the_host_the_rest() -> None:
    cores = sorted(os.sched_getaffinity(0))
    placement = Placement.split()
    assert placement is not None
    assert placement.engine_cores == (cores[-1],) and placement.host_cores == tuple(cores[:-1])
    assert placement.environment() == {
        "VLLM_CPU_OMP_THREADS_BIND": str(cores[-1]),
        **dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), str(len(cores) - 1)),
    }
    assert Placement.split(engine_cores=len(cores)) is None


@needs_two_cores
def test_pinning_moves_every_thread_and_what_starts_later() -> None:
    """In a child process (pinning the test runner would pin the rest of the tests): a thread started
    before the pinning and one started after both end up on the host cores."""
    code = """
import os, threading, time
from rps_harness.loadtest.placement import Placement
early = threading.Thread(target=time.sleep, args=(2,), daemon=True)
early.start()
placement = Placement.split()
placement.pin_this_process()
late = threading.Thread(target=time.sleep, args=(2,), daemon=True)
late.start()
tasks = sorted(os.listdir("/proc/self/task"))
print(sorted({c for t in tasks for c in os.sched_getaffinity(int(t))}), list(placement.host_cores))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    seen, host = out.strip().split("] [")
    assert seen + "]" == "[" + host


@needs_two_cores
def test_a_server_started_while_loading_gets_every_core_and_the_starter_its_host_cores_back() -> None:
    """In a child process, as above: pinned, it starts a process inside `loading` and one after."""
    code = """
import json, os, subprocess, sys
from rps_harness.loadtest.placement import Placement
placement = Placement.split()
placement.pin_this_process()
show = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
with placement.loading():
    during = subprocess.run(show, capture_output=True, text=True, check=True).stdout
after = subprocess.run(show, capture_output=True, text=True, check=True).stdout
print(json.dumps([json.loads(during), json.loads(after), sorted(os.sched_getaffinity(0))]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    placement = Placement.split()
    assert placement is not None
    host = list(placement.host_cores)
    assert json.loads(out) == [sorted(os.sched_getaffinity(0)), host, host]


@needs_two_cores
def test_placing_a_server_moves_its_tree_to_the_host_but_for_threads_bound_to_the_engine() -> None:
    """A stand-in server on every core: a thread bound to the engine core (as vLLM binds its worker's),
    a free one, and a child process with a free thread of its own. Placed, only the bound thread is
    left on the engine core."""
    placement = Placement.split()
    assert placement is not None
    code = f"""
import os, subprocess, sys, threading, time
def bound():
    os.sched_setaffinity(0, {list(placement.engine_cores)})
    time.sleep(60)
threading.Thread(target=bound, daemon=True).start()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import threading, time; "
    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start(); "
    "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(60)
"""
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    child = int(server.stdout.readline())
    try:
        placement.pin_tree(server.pid)
        cores = {
            (pid, int(tid)): sorted(os.sched_getaffinity(int(tid)))
            for pid in (server.pid, child)
            for tid in os.listdir(f"/proc/{pid}/task")
        }
    finally:
        for pid in (child, server.pid):
            os.kill(pid, signal.SIGKILL)
        server.wait()
    engine, host = list(placement.engine_cores), list(placement.host_cores)
    assert [c for c in cores.values() if c != host] == [engine]
    assert sum(1 for pid, _ in cores if pid == child) == 2  # the child's threads were read too


def test_the_usage_of_this_process_is_the_clients_and_grows_with_work() -> None:
    before = process_usage(None)
    sum(i * i for i in range(2_000_000))
    (client,) = usage_during(before, process_usage(None))
    assert client["role"] == "client" and client["pid"] == os.getpid()
    assert client["cpu_s"] > 0
    allowed = sorted(os.sched_getaffinity(0))
    assert client["cores"].split(" ")[0] in {",".join(map(str, allowed)), f"{allowed[0]}-{allowed[-1]}"}
