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
    defaults = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_RPC_BASE_PATH": str(workdir),
        "VLLM_CACHE_ROOT": str(workdir / "cache"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
