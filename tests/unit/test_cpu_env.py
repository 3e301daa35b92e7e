"""Where an isolated profile of a CPU engine computes (as a served worker would), and a process made to
compute there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rps_serve.vllm_plugin.cpu_env import OMP_BIND_ENV, RESERVED_CPU_ENV, profiling_cores

needs_two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")


def test_an_explicit_binding_names_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OMP_BIND_ENV, "0,2-4")
    assert profiling_cores() == (0, 2, 3, 4)
    monkeypatch.setenv(OMP_BIND_ENV, "0-1|2-3")
    with pytest.raises(ValueError, match="several ranks"):
        profiling_cores()
    monkeypatch.setenv(OMP_BIND_ENV, "nobind")
    assert profiling_cores() is None


@needs_two_cores
def test_auto_takes_as_many_cores_as_a_served_worker_from_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv(OMP_BIND_ENV, raising=False)
    monkeypatch.delenv(RESERVED_CPU_ENV, raising=False)
    assert profiling_cores() == tuple(cores[1:])  # vLLM keeps one for the engine core
    monkeypatch.setenv(RESERVED_CPU_ENV, str(len(cores) - 1))
    assert profiling_cores() == (cores[-1],)
    monkeypatch.setenv(RESERVED_CPU_ENV, str(len(cores)))
    assert profiling_cores() == (cores[-1],)  # a worker computes somewhere


@pytest.mark.slow
@needs_two_cores
def test_a_process_computes_on_the_cores_it_is_given_with_a_thread_each() -> None:
    """In a child process: pinning the test runner would pin the rest of the tests."""
    core = sorted(os.sched_getaffinity(0))[-1]
    code = f"""
import os, torch
from rps_serve.vllm_plugin.cpu_env import compute_on
compute_on(({core},))
print(sorted(os.sched_getaffinity(0)), torch.get_num_threads())
"""
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert printed.stdout.split() == [f"[{core}]", "1"]
