"""The local tritonserver's environment, command line and clean-up (no server started)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from rps_harness.local import server
from rps_harness.local.server import (
    SHM_DIR,
    SHM_PREFIX,
    Endpoints,
    EngineSettings,
    Ports,
    launch_server,
    models_still_loading,
    remove_shm,
    remove_stale_shm,
    server_command,
    server_environment,
    shm_mapped_by,
)
from rps_serve.triton.settings import ENGINE_ARGS_ENV, RUN_LOG_ENV, SETTINGS_FILE, read_settings
from tests.checkout import REPOSITORY


def test_malloc_arenas_are_capped_unless_the_caller_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert server_environment()["MALLOC_ARENA_MAX"] == "2"
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert server_environment()["MALLOC_ARENA_MAX"] == "8"
    assert server_environment({"MALLOC_ARENA_MAX": "4"})["MALLOC_ARENA_MAX"] == "4"


def test_server_command_names_its_shared_memory_and_ports(tmp_path: Path) -> None:
    endpoints = Ports(http=8000, grpc=8001, metrics=8002).endpoints()
    command = server_command(tmp_path, tmp_path / "repo", endpoints, shm_prefix="rps-serve-1-0")
    assert {"--http-port=8000", "--grpc-port=8001", "--metrics-port=8002"} <= set(command)
    assert "--backend-config=python,shm-region-prefix-name=rps-serve-1-0-python" in command
    picked = Ports().endpoints()
    assert 0 not in (picked.http_port, picked.grpc_port, picked.metrics_port)
    assert not any(arg.startswith("--model-control-mode") for arg in command)  # every model loads
    chosen = server_command(tmp_path, tmp_path / "repo", endpoints, "rps-serve-1-0", models=["a", "b"])
    assert chosen[-3:] == ["--model-control-mode=explicit", "--load-model=a", "--load-model=b"]


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_stale_regions_of_gone_servers_are_removed_and_live_ones_kept() -> None:
    gone = SHM_DIR / f"{SHM_PREFIX}-{_dead_pid()}-0-python_test"
    live = SHM_DIR / f"{SHM_PREFIX}-{os.getpid()}-0-python_test"
    for path in (gone, live):
        path.write_bytes(b"x")
    try:
        removed = remove_stale_shm()
        assert gone in removed and not gone.exists()
        assert live.exists()
    finally:
        gone.unlink(missing_ok=True)
        live.unlink(missing_ok=True)


def test_a_server_s_regions_and_those_its_processes_mapped_are_removed(tmp_path: Path) -> None:
    """`shm_mapped_by` finds a region a process (and its children) maps; `remove_shm` removes the
    server's prefixed regions and those, and nothing else."""
    prefix = f"{SHM_PREFIX}-{os.getpid()}-test"
    ours, mapped, other = (
        SHM_DIR / f"{prefix}-python_1",
        SHM_DIR / f"psm_rpstest{os.getpid()}a",
        SHM_DIR / f"psm_rpstest{os.getpid()}b",
    )
    for path in (ours, mapped, other):
        path.write_bytes(b"x" * 4096)
    mapper = subprocess.Popen(
        [sys.executable, "-c", f"import mmap, sys, time; f = open({str(mapped)!r}, 'r+b'); "
         "m = mmap.mmap(f.fileno(), 0); print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert mapper.stdout is not None and mapper.stdout.readline().strip() == "ready"
        found = shm_mapped_by(os.getpid())  # the test process and its child, the mapper
        assert mapped in found and other not in found
        mapper.kill()
        mapper.wait()
        assert set(remove_shm(prefix, found)) == {ours, mapped}
        assert other.exists()
    finally:
        mapper.kill()
        for path in (ours, mapped, other):
            path.unlink(missing_ok=True)


def test_the_models_still_loading_are_read_from_the_log() -> None:
    log = """
I1201 model_lifecycle.cc:472] "loading: preprocess:1"
I1201 model_lifecycle.cc:472] "loading: impact_estimator:1"
I1201 model_lifecycle.cc:472] "loading: vllm_model:1"
I1201 model_lifecycle.cc:839] "successfully loaded 'impact_estimator'"
E1201 model_lifecycle.cc:642] "failed to load 'vllm_model' version 1: Internal: boom"
"""
    assert models_still_loading(log) == ["preprocess"]


def test_chosen_ports_are_distinct_free_and_outside_the_kernels_own_range() -> None:
    import random
    import socket

    from rps_harness.local.server import EPHEMERAL_PORTS, Ports

    low = int(EPHEMERAL_PORTS.read_text().split()[0])
    for _ in range(20):
        random.seed(0)  # a caller's seeding does not make two servers pick the same ports
        endpoints = Ports().endpoints()
        ports = [endpoints.http_port, endpoints.grpc_port, endpoints.metrics_port]
        assert len(set(ports)) == 3 and all(port < low for port in ports)
        for port in ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", port))
    given = Ports(http=8000).endpoints()
    assert given.http_port == 8000 and 8000 not in (given.grpc_port, given.metrics_port)


def test_a_launched_server_s_engines_see_the_settings_given_and_vllm_s_places_under_its_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `launch_server` hands `local_server` (which the e2e tier starts for real)."""
    started: dict[str, Mapping[str, str]] = {}

    @contextlib.contextmanager
    def fake_server(
        repository: Path, workdir: Path, env: Mapping[str, str], *args: object, **kwargs: object
    ) -> Iterator[Endpoints]:
        started["env"] = env
        yield Endpoints(1, 2, 3)

    monkeypatch.setattr(server, "local_server", fake_server)
    monkeypatch.chdir(tmp_path)
    for name in ("VLLM_RPC_BASE_PATH", "VLLM_CACHE_ROOT", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")  # this process's value stays the server's
    engines = EngineSettings(model=Path("model"), policy="fcfs", run_log=Path("runs") / "fcfs.jsonl")
    with launch_server(REPOSITORY, tmp_path / "server", engines):
        pass
    env = started["env"]
    settings = read_settings(REPOSITORY / SETTINGS_FILE, REPOSITORY, env)
    assert (settings.model, settings.policy.value) == ((tmp_path / "model").resolve(), "fcfs")
    assert env[RUN_LOG_ENV] == str(tmp_path / "runs" / "fcfs.jsonl")
    assert ENGINE_ARGS_ENV not in env
    assert env["VLLM_RPC_BASE_PATH"] == str(tmp_path / "server" / "vllm")
    assert env["HF_HUB_OFFLINE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env
    assert "VLLM_RPC_BASE_PATH" not in os.environ  # for the server alone


def test_engine_settings_left_empty_keep_model_json_s() -> None:
    assert EngineSettings().environment() == {}


def test_a_variant_s_scheduler_settings_go_over_model_json_s_key_by_key() -> None:
    env = EngineSettings(policy="headroom", scheduler={"cost_order": 20.0}).environment()
    settings = read_settings(REPOSITORY / SETTINGS_FILE, REPOSITORY, env)
    shipped = read_settings(REPOSITORY / SETTINGS_FILE, REPOSITORY, {}).rps
    assert settings.policy.value == "headroom"
    assert settings.rps == {**shipped, "cost_order": 20.0}
