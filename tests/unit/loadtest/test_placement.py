"""Where a benchmark's processes run: the engine's worker on its own core, the rest on the others,
and what each process used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rps_serve.loadtest.placement import Placement, process_usage, usage_during

needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


@needs_two_cores
def test_the_engine_gets_the_last_core_and_the_host_the_rest() -> None:
    cores = sorted(os.sched_getaffinity(0))
    placement = Placement.split()
    assert placement is not None
    assert placement.engine_cores == (cores[-1],) and placement.host_cores == tuple(cores[:-1])
    assert placement.environment() == {"VLLM_CPU_OMP_THREADS_BIND": str(cores[-1])}
    assert Placement.split(engine_cores=len(cores)) is None


@needs_two_cores
def test_pinning_moves_every_thread_and_what_starts_later() -> None:
    """In a child process (pinning the test runner would pin the rest of the tests): a thread started
    before the pinning and one started after both end up on the host cores."""
    code = """
import os, threading, time
from rps_serve.loadtest.placement import Placement
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


def test_the_usage_of_this_process_is_the_clients_and_grows_with_work() -> None:
    before = process_usage(None)
    sum(i * i for i in range(2_000_000))
    (client,) = usage_during(before, process_usage(None))
    assert client["role"] == "client" and client["pid"] == os.getpid()
    assert client["cpu_s"] > 0
    allowed = sorted(os.sched_getaffinity(0))
    assert client["cores"].split(" ")[0] in {",".join(map(str, allowed)), f"{allowed[0]}-{allowed[-1]}"}
