"""Where a benchmark's processes run, and what each of them used.

On a GPU server the engine's compute runs on its own device, and the host's CPU work (Triton, the
Python-backend stubs, vLLM's EngineCore, the load client) cannot slow its steps. On the CPU stack the
same holds only if the engine's worker has cores of its own: `Placement` gives it the last core(s)
(vLLM's `VLLM_CPU_OMP_THREADS_BIND` binds the worker's threads there) and pins this process, and so
every process it starts, to the others. A server loads its models on every core (`loading`: three
engines' imports shared the one host core for ~170 s) and is placed once it is ready (`pin_tree`),
before any run. `process_usage` reads, for a server's process tree and this process, which cores
each may run on and the CPU seconds it has used, so that a run records both.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_serve.process_tree import process_tree
from rps_serve.vllm_plugin.cpu_env import OMP_BIND_ENV

THREAD_POOL_ENVS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Placement:
    engine_cores: tuple[int, ...]
    host_cores: tuple[int, ...]

    @classmethod
    def split(cls, engine_cores: int = 1) -> Placement | None:
        """The last `engine_cores` of the cores this process may use for the engine, the rest for
        everything else; None where that leaves the host no core."""
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) <= engine_cores:
            return None
        return cls(tuple(cores[-engine_cores:]), tuple(cores[:-engine_cores]))

    def environment(self) -> dict[str, str]:
        """For the server's environment: where vLLM's CPU worker binds its threads, and the size of
        every other process's thread pools (OpenMP, so torch's; BLAS's): the host's cores. Those pools
        are sized at start from the cores a process may use, and a server loads on every core
        (`loading`): sized here, they are what they were when the whole server started on the host
        cores, not pools for every core pinned to fewer (side by side the closed loop measured the
        same either way, 0.53 and 0.50 req/s). The worker sizes its own pool from its binding."""
        host = str(len(self.host_cores))
        return {
            OMP_BIND_ENV: ",".join(str(core) for core in self.engine_cores),
            **{pool: host for pool in THREAD_POOL_ENVS},
        }

    def pin_this_process(self) -> None:
        """Every thread of this process, and every process or thread it starts from now on, on the host
        cores (an affinity is a thread's: setting the process's leaves its other threads where they were)."""
        for task in Path("/proc/self/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), self.host_cores)
            except OSError:  # ended meanwhile
                continue

    @contextmanager
    def loading(self) -> Iterator[None]:
        """The calling thread on every core for the block, and so a server it starts (a thread's
        affinity is what its children inherit); back on the host cores after it."""
        os.sched_setaffinity(0, self.engine_cores + self.host_cores)
        try:
            yield
        finally:
            os.sched_setaffinity(0, self.host_cores)

    def pin_tree(self, pid: int) -> None:
        """Every thread of process `pid` and of its descendants onto the host cores, but for those
        already bound within the engine cores (the engine worker's, which vLLM bound there) or the
        host's. Passes repeat until one moves nothing: a thread started meanwhile by a thread not yet
        moved would inherit the cores it left."""
        import psutil

        engine, host = set(self.engine_cores), set(self.host_cores)
        moved = True
        while moved:
            moved = False
            for process in process_tree(pid):
                try:
                    threads = process.threads()
                except psutil.Error:  # ended meanwhile
                    continue
                for thread in threads:
                    try:
                        cores = os.sched_getaffinity(thread.id)
                        if not (cores <= engine or cores <= host):
                            os.sched_setaffinity(thread.id, self.host_cores)
                            moved = True
                    except OSError:  # ended meanwhile
                        continue

    def describe(self) -> str:
        return (
            f"engine worker on core(s) {_cores(self.engine_cores)}, the rest on {_cores(self.host_cores)} "
            "(servers load their models on every core and are placed once ready)"
        )


@dataclass(frozen=True)
class ProcessUsage:
    """One process: what it is, the cores its threads may run on, and its CPU seconds so far."""

    role: str
    pid: int
    cores: str
    cpu_s: float


def process_usage(server_pid: int | None) -> list[ProcessUsage]:
    """This process (the load client) and the server's process tree, each with its role."""
    import psutil

    processes = [psutil.Process(), *(process_tree(server_pid) if server_pid is not None else [])]
    usage = []
    for process in processes:
        try:
            with process.oneshot():
                times = process.cpu_times()
                role = "client" if process.pid == os.getpid() else _role(process.name(), process.cmdline())
                usage.append(
                    ProcessUsage(role, process.pid, _thread_cores(process), times.user + times.system)
                )
        except psutil.Error:  # ended meanwhile
            continue
    return usage


def usage_during(before: Sequence[ProcessUsage], after: Sequence[ProcessUsage]) -> list[dict[str, Any]]:
    """Per process alive at the end: its role, cores and the CPU seconds it used between the two
    readings (all of them for a process started in between)."""
    earlier = {u.pid: u.cpu_s for u in before}
    return [
        {**asdict(u), "cpu_s": round(u.cpu_s - earlier.get(u.pid, 0.0), 2)}
        for u in sorted(after, key=lambda u: u.role)
    ]


def _role(name: str, cmdline: list[str]) -> str:
    if "triton_python_backend_stub" in name or any("triton_python_backend_stub" in a for a in cmdline[:1]):
        # The stub's first argument is the model's file: <repository>/<model>/<version>/model.py.
        model = Path(cmdline[1]).parts[-3] if len(cmdline) > 1 and len(Path(cmdline[1]).parts) >= 3 else "?"
        return f"stub {model}"
    return name


def _thread_cores(process: Any) -> str:
    """The cores the process's threads may run on (threads can be bound apart from their process),
    each set with its share of the process's CPU time so far: "1 (97%), 0 (3%)"."""
    shares: dict[str, float] = {}
    for thread in process.threads():
        try:
            cores = _cores(tuple(sorted(os.sched_getaffinity(thread.id))))
        except OSError:  # ended meanwhile
            continue
        shares[cores] = shares.get(cores, 0.0) + thread.user_time + thread.system_time
    total = sum(shares.values()) or 1.0
    ranked = sorted(shares.items(), key=lambda item: -item[1])
    return ", ".join(f"{cores} ({100 * cpu / total:.0f}%)" for cores, cpu in ranked)


def _cores(cores: Sequence[int]) -> str:
    """ "0,2-4" for (0, 2, 3, 4)."""
    ranges = []
    # Consecutive cores share their value minus their rank.
    for _, run in itertools.groupby(enumerate(sorted(cores)), key=lambda ranked: ranked[1] - ranked[0]):
        first, *rest = (core for _, core in run)
        ranges.append(f"{first}-{rest[-1]}" if rest else f"{first}")
    return ",".join(ranges)
