"""A local Triton Inference Server (the binary in the nvidia-pytriton wheel) bound to 127.0.0.1.

The wheel's tree is copied once into a writable directory, where the Python-backend stub for this
interpreter and the ONNX Runtime stand-in (`local/onnxruntime_backend.py`) are added: the
bundle has no ONNX Runtime backend, and Triton serves a `backends/<name>/model.py` as a Python-based
backend, so a repository written for the real backend loads unchanged. The stub runs its Python in
isolated mode and finds the virtualenv only through `PATH`, so the venv's bin goes first.

`launch_server` is the one way the commands, the demo and the benchmarks start it: `local_server`, its
engines set through `triton.settings`' environment overrides (`EngineSettings`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rps_serve.process_tree import process_tree
from rps_serve.triton.server_release import CONTAINER_VERSION_ENV, SERVER_VERSION_ENV
from rps_serve.triton.settings import (
    ENGINE_ARGS_ENV,
    FRONT_END_ENV,
    MODEL_ENV,
    POLICY_ENV,
    RUN_LOG_ENV,
    SCHEDULER_ENV,
)
from rps_serve.vllm_plugin.cpu_env import cpu_engine_environment

logger = logging.getLogger(__name__)

SHM_DIR = Path("/dev/shm")
# The shared-memory regions of a launcher's server are named after it (`local_server`), so that what a
# server leaves behind, however it ended, can be found and removed.
SHM_PREFIX = "rps-serve"
ONNX_STAND_IN = Path(__file__).with_name(
    "onnxruntime_backend.py"
)  # copied in as backends/onnxruntime/model.py
LOCALHOST = "127.0.0.1"
# Room for a decoded video in one shared-memory region instead of growing it 1 MB at a time.
PYTHON_SHM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Endpoints:
    http_port: int
    grpc_port: int
    metrics_port: int
    pid: int | None = None  # the tritonserver process, once started

    @property
    def http_url(self) -> str:
        return f"{LOCALHOST}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{LOCALHOST}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{LOCALHOST}:{self.metrics_port}/metrics"


# Where the kernel hands out ports to outgoing connections and `bind(0)`; an unused port from there can
# be taken by any socket (the load client's, vLLM's) between choosing it and tritonserver binding it,
# a minute later once the models are loaded.
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
SERVER_PORTS = range(20000, 32768)  # below Linux's default ephemeral range


_PORT_CHOICE = random.SystemRandom()  # not the `random` module's state, which a caller may have seeded


def free_port(taken: frozenset[int] = frozenset()) -> int:
    """A port that is free now, not in `taken`, and that the kernel does not give out to other sockets
    meanwhile: one below the ephemeral range (where the range cannot be read, one the kernel picks)."""
    try:
        low = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    candidates = [port for port in SERVER_PORTS if port < low and port not in taken]
    for port in _PORT_CHOICE.sample(candidates, min(len(candidates), 64)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOCALHOST, port))
            except OSError:
                continue
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((LOCALHOST, 0))
            chosen: int = probe.getsockname()[1]
        if chosen not in taken:
            return chosen


# The tritonserver that nvidia-pytriton 0.7.0 (pyproject's `triton` extra) ships.
BUNDLED_SERVER_VERSION = "2.51.0"


def _pytriton_tree() -> Path:
    try:
        import pytriton
    except ImportError as error:
        raise FileNotFoundError("nvidia-pytriton is not installed: run `make setup`") from error
    return Path(pytriton.__file__).parent / "tritonserver"


def prepare_server_tree(workdir: Path) -> Path:
    """A writable copy of the wheel's tritonserver tree with this Python's stub and the ONNX stand-in."""
    source = _pytriton_tree()
    tree = workdir / "tritonserver"
    if not (tree / "bin" / "tritonserver").is_file():
        shutil.copytree(source, tree, dirs_exist_ok=True)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = source / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise FileNotFoundError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
    target = tree / "backends" / "python" / stub.name
    if not target.is_file() or target.stat().st_size != stub.stat().st_size:
        shutil.copy2(stub, target)  # not over a running stub ("text file busy")
    onnx_backend = tree / "backends" / "onnxruntime"
    onnx_backend.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ONNX_STAND_IN, onnx_backend / "model.py")
    return tree


def server_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment tritonserver and its stubs need: venv first on PATH, the wheel's libraries, and
    at most two glibc malloc arenas per process unless `MALLOC_ARENA_MAX` is set (glibc's default, up to
    8 per core, lets tritonserver's many threads fragment the heap; the soaks in
    docs/limits-and-guarantees.md, "Overload")."""
    libs = Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"
    libpython = sysconfig.get_config_var("LIBDIR") or ""
    env = dict(os.environ)
    env.setdefault("MALLOC_ARENA_MAX", "2")
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    # Named as NVIDIA's containers name theirs, for the models' start-up line (triton.server_release).
    env[SERVER_VERSION_ENV] = BUNDLED_SERVER_VERSION
    env.pop(CONTAINER_VERSION_ENV, None)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(libs), libpython, env.get("LD_LIBRARY_PATH", "")) if p
    )
    env.update(extra or {})
    return env


def server_command(
    tree: Path,
    repository: Path,
    endpoints: Endpoints,
    shm_prefix: str,
    log_verbose: int = 0,
    models: Sequence[str] = (),
) -> list[str]:
    """`shm_prefix` names the server's shared-memory regions: the python backend's setting, which the
    Python-based backends (the ONNX stand-in) take too; `log_verbose` is Triton's `--log-verbose`;
    `models`, where given, are the only ones loaded (Triton's explicit model control), else all."""
    explicit = ["--model-control-mode=explicit", *(f"--load-model={name}" for name in models)]
    return [
        str(tree / "bin" / "tritonserver"),
        f"--model-repository={repository}",
        f"--backend-directory={tree / 'backends'}",
        f"--http-address={LOCALHOST}",
        f"--http-port={endpoints.http_port}",
        f"--grpc-address={LOCALHOST}",
        f"--grpc-port={endpoints.grpc_port}",
        "--allow-metrics=true",
        "--allow-gpu-metrics=false",
        "--allow-cpu-metrics=false",
        f"--metrics-address={LOCALHOST}",
        f"--metrics-port={endpoints.metrics_port}",
        f"--backend-config=python,shm-default-byte-size={PYTHON_SHM_BYTES}",
        f"--backend-config=python,shm-growth-byte-size={PYTHON_SHM_BYTES}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}-python",
        "--log-info=true",
        f"--log-verbose={log_verbose}",
        # In-flight requests at shutdown belong to clients that are gone or will see the error.
        "--exit-timeout-secs=10",
        *(explicit if models else []),
    ]


def _ready(endpoints: Endpoints) -> bool:
    try:
        with urllib.request.urlopen(f"http://{endpoints.http_url}/v2/health/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def models_still_loading(log: str) -> list[str]:
    """The models a tritonserver log shows loading and not yet loaded (or failed). Triton opens its
    endpoints only once the initial load is over, so until then its log is the only one to ask."""
    started = re.findall(r'"loading: ([^:"]+):\d+"', log)
    ended = set(re.findall(r"(?:successfully loaded|failed to load) '([^']+)'", log))
    return [name for name in dict.fromkeys(started) if name not in ended]


def log_tail(path: Path, lines: int = 20, errors: int = 5) -> str:
    """The log's first `errors` error lines (Triton's start with "E", a model's load failure among them),
    then its last `lines` lines."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    first_errors = [line for line in text if line.startswith("E")][:errors]
    return "\n".join([*first_errors, "...", *text[-lines:]] if first_errors else text[-lines:])


class ServerFailed(RuntimeError):
    """tritonserver exited or did not become ready."""


@dataclass(frozen=True)
class Ports:
    """Where the server listens; 0 picks a free port."""

    http: int = 0
    grpc: int = 0
    metrics: int = 0

    def endpoints(self) -> Endpoints:
        """The given ports, and distinct free ones for those left 0."""
        chosen: list[int] = []
        for port in (self.http, self.grpc, self.metrics):
            chosen.append(port or free_port(frozenset(chosen) | {self.http, self.grpc, self.metrics}))
        return Endpoints(*chosen)


_servers_started = itertools.count()


@contextmanager
def local_server(
    repository: Path,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    load_timeout_s: float = 900.0,
    ports: Ports = Ports(),
    log_verbose: int = 0,
    models: Sequence[str] = (),
    stop_grace_s: float = 60.0,
) -> Iterator[Endpoints]:
    """Run tritonserver on `repository` (only `models` loaded, where given) until the block exits;
    yields its endpoints once every model is loaded. A model not loaded within `load_timeout_s` fails
    the start with its name (from the log) and the log's error lines and tail. At the end the server
    gets `stop_grace_s` to unload its models (about 9 s with a vLLM engine on 2 cores), then it and
    every process it started are killed; 0 kills them at once (a test's server, whose checks are
    over). Shared-memory regions
    the server leaves in /dev/shm are removed when it ends, and those of earlier servers whose launcher
    is gone when it starts (the regions their vLLM processes mapped cannot be told from other programs'
    then, and stay)."""
    tree = prepare_server_tree(workdir)
    endpoints = ports.endpoints()
    log_path = log_file or workdir / "tritonserver.log"
    remove_stale_shm()
    shm_prefix = f"{SHM_PREFIX}-{os.getpid()}-{next(_servers_started)}"
    with log_path.open("ab") as log:
        log_start = log.tell()  # the log may hold earlier servers' runs
        process = subprocess.Popen(
            server_command(tree, repository.resolve(), endpoints, shm_prefix, log_verbose, models),
            env=server_environment(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        logger.info("tritonserver pid %d, log %s", process.pid, log_path)
        try:
            deadline = time.monotonic() + load_timeout_s
            while not _ready(endpoints):
                if process.poll() is not None:
                    raise ServerFailed(
                        f"tritonserver exited with {process.returncode}; the end of {log_path}:\n"
                        + log_tail(log_path)
                    )
                if time.monotonic() > deadline:
                    with log_path.open("rb") as written:
                        written.seek(log_start)
                        loading = models_still_loading(written.read().decode(errors="replace")) or ["?"]
                    raise ServerFailed(
                        f"model {', '.join(loading)} not loaded within {load_timeout_s:.0f} s; "
                        f"the end of {log_path}:\n{log_tail(log_path)}"
                    )
                time.sleep(1.0)
            yield dataclasses.replace(endpoints, pid=process.pid)
        finally:
            mapped = {p for p in shm_mapped_by(process.pid) if not p.name.startswith(shm_prefix)}
            _stop(process, stop_grace_s)
            remove_shm(shm_prefix, mapped)


@dataclass(frozen=True)
class EngineSettings:
    """What a local server's engines start with over their model.json (`triton.settings`' environment
    overrides): the model, the policy, the front end, engine arguments and the plug-in's `rps` settings
    (each key by key), each None or empty to keep model.json's, and the run log each writes
    (`triton.run_log`), if any; `env` is more of the server's environment (a placement's)."""

    model: Path | None = None
    policy: str | None = None
    front_end: str | None = None
    engine_args: str = ""
    scheduler: Mapping[str, Any] = field(default_factory=dict)
    run_log: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """The overrides, paths made absolute (the server's processes need not share this one's
        working directory)."""
        env = {MODEL_ENV: str(self.model.resolve())} if self.model is not None else {}
        if self.policy is not None:
            env[POLICY_ENV] = self.policy
        env.update(self.env)
        if self.front_end is not None:
            env[FRONT_END_ENV] = self.front_end
        if self.engine_args:
            env[ENGINE_ARGS_ENV] = self.engine_args
        if self.scheduler:
            env[SCHEDULER_ENV] = json.dumps(self.scheduler)
        if self.run_log is not None:
            env[RUN_LOG_ENV] = str(self.run_log.absolute())
        return env


def launch_server(
    repository: Path,
    workdir: Path,
    engines: EngineSettings = EngineSettings(),
    log_file: Path | None = None,
    ports: Ports = Ports(),
    load_timeout_s: float = 900.0,
    models: Sequence[str] = (),
) -> AbstractContextManager[Endpoints]:
    """The local server the commands, the demo and the benchmarks start: `local_server` on
    `repository` (its tree and, unless `log_file`, its log in `workdir`), its engines started with
    `engines`, vLLM's sockets and caches under `workdir`/vllm where this process's environment does not
    place them already (`vllm_plugin.cpu_env`)."""
    env = {**cpu_engine_environment(workdir / "vllm"), **engines.environment()}
    return local_server(repository, workdir, env, log_file, load_timeout_s, ports, models=models)


def _stop(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM lets Triton unload models (and vLLM shut its engine down) for `grace_s` (none if 0);
    kill what is left after that."""
    if process.poll() is None and grace_s > 0:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("tritonserver did not stop within %.0f s; killing it", grace_s)
    # The stubs and vLLM's engine process share the server's session: end any that outlived it.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def remove_shm(prefix: str, mapped: set[Path]) -> list[Path]:
    """Remove the server's regions (named `prefix`-...) and `mapped`, the other regions its processes
    had mapped (vLLM's `psm_*`, Python multiprocessing's), once the server is gone: a server killed
    mid-run leaves them behind, and they hold memory until removed."""
    removed = []
    for path in [*SHM_DIR.glob(f"{prefix}-*"), *mapped]:
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    if removed:
        logger.info("removed %d shared-memory regions left in %s", len(removed), SHM_DIR)
    return removed


def remove_stale_shm() -> list[Path]:
    """Remove the regions of servers whose launcher (the pid in the name) is no longer running."""
    removed = []
    for path in SHM_DIR.glob(f"{SHM_PREFIX}-*"):
        pid = path.name.removeprefix(f"{SHM_PREFIX}-").split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    if removed:
        logger.info("removed %d shared-memory regions of servers that are gone", len(removed))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shm_mapped_by(pid: int) -> set[Path]:
    """The /dev/shm files that process `pid` and its descendants map (while they run)."""
    mapped: set[Path] = set()
    for process in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{process.pid}/maps").read_text().splitlines():
                if f" {SHM_DIR}/" in line:
                    mapped.add(Path(line.split(maxsplit=5)[-1].removesuffix(" (deleted)")))
    return mapped
