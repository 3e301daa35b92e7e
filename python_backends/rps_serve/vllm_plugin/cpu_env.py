"""Environment a vLLM CPU engine needs on these machines; set before vLLM is imported."""

from __future__ import annotations

import os
from pathlib import Path


def configure_cpu_engine_environment(workdir: Path, kv_cache_gib: int = 1) -> None:
    """Keep vLLM's sockets and caches under `workdir`, stay offline, and size the CPU KV cache.

    Values already in the environment win. Without VLLM_CPU_KVCACHE_SPACE vLLM's memory check
    refuses to start; without the paths it writes sockets and caches to shared locations.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.update(cpu_engine_environment(workdir, kv_cache_gib))


def cpu_engine_environment(workdir: Path, kv_cache_gib: int = 1) -> dict[str, str]:
    """What `configure_cpu_engine_environment` would add to this process's environment, for another
    process's alone (a server's): the values the environment lacks, `workdir` made if they place
    anything there."""
    defaults = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_RPC_BASE_PATH": str(workdir),
        "VLLM_CACHE_ROOT": str(workdir / "cache"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    missing = {key: value for key, value in defaults.items() if key not in os.environ}
    if {"VLLM_RPC_BASE_PATH", "VLLM_CACHE_ROOT"} & set(missing):
        workdir.mkdir(parents=True, exist_ok=True)
    return missing


OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
RESERVED_CPU_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"


def profiling_cores() -> tuple[int, ...] | None:
    """The cores an isolated profile of a CPU engine computes on, one torch thread each: where
    `VLLM_CPU_OMP_THREADS_BIND` names cores, those, as the served worker binds to them; under vLLM's
    `auto` (its default) as many as a served worker gets there, all this process may use but
    `VLLM_CPU_NUM_OF_RESERVED_CPU` (1 unless set) that vLLM leaves to the engine-core process, taken
    from the end (where `loadtest.placement` puts a benchmark's engine) rather than from the start as
    vLLM does, away from the core most else on a machine runs on; None for `nobind`. (On x86 vLLM's
    `auto` also keeps one logical CPU per physical core; that is not modelled.)"""
    bind = os.environ.get(OMP_BIND_ENV, "auto")
    if bind == "nobind":
        return None
    if bind != "auto":
        if "|" in bind:
            raise ValueError(f"{OMP_BIND_ENV}={bind!r} binds several ranks; one is profiled")
        return tuple(_parse_core_list(bind))
    cores = sorted(os.sched_getaffinity(0))
    reserved = int(os.environ.get(RESERVED_CPU_ENV, "1"))
    return tuple(cores[min(reserved, len(cores) - 1) :])


def _parse_core_list(text: str) -> list[int]:
    """`"0,2-4"` -> [0, 2, 3, 4]."""
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        cores.extend(range(int(first), int(last or first) + 1))
    return cores


def compute_on(cores: tuple[int, ...]) -> None:
    """Make this process compute on `cores`, one torch thread each, as a served CPU worker bound to
    them does. For a process of its own (a profiler), before it computes anything."""
    os.sched_setaffinity(0, cores)
    os.environ["OMP_NUM_THREADS"] = str(len(cores))
    import torch

    torch.set_num_threads(len(cores))
