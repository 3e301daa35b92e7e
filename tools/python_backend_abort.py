"""Triton 2.51's Python backend aborts the whole server when a decoupled model's stub dies while it
sends responses: shown on demand without any serving code of this project (the server's tree is
prepared as the e2e tests' is, `rps_harness.local.server.prepare_server_tree`).

The script writes a throwaway model repository of trivial decoupled Python-backend models (each
request is answered from a thread of its own with `--responses` one-string responses,
`response_sender.send` after `response_sender.send`, `--gap-ms` apart, then the final flag), starts
the tritonserver binary and Python backend of the nvidia-pytriton wheel (those the e2e tests run),
opens `--streams` concurrent gRPC streams spread over the models, SIGKILLs the
`triton_python_backend_stub` of `--kill-models` of them after `--kill-after` seconds, and watches
for `--watch` seconds whether tritonserver aborts
(`terminate called after throwing an instance of 'boost::interprocess::lock_exception'`). Each
round runs a fresh server; the last line says how many rounds aborted.

    .venv/bin/python tools/python_backend_abort.py                   # 4 models, 12 streams, 4 stubs killed
    .venv/bin/python tools/python_backend_abort.py --models 1 --streams 6 --kill-models 1 --rounds 20

The abort needs a stub to die in the middle of a send: the stub holds the send's inter-process mutex
(a robust pthread mutex, as Boost.Interprocess makes them) between queueing the response and waiting
for the server; the server's thread that handled the response then locks it at the end of
`ResponseSendDecoupled`, gets EOWNERDEAD, Boost throws `lock_exception`, and it is thrown from a
`ScopedDefer` destructor, so `std::terminate` ends the process. `--kill-models 0` only streams;
`--instances`, `--busy` (processes spinning on the CPU) and `--cpus` (taskset) vary the rest. The
work directory (`--workdir`, a temporary one by default) keeps each round's server log.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from rps_harness.local.server import prepare_server_tree

LOCALHOST = "127.0.0.1"
ABORT_MARKS = ("lock_exception", "terminate called", "Signal (6)")
STUB_NAME = "triton_python_backend_stub"

MODEL_PY = textwrap.dedent(
    '''\
    """Streams RESPONSES small responses per request, GAP_S apart, from a thread per request."""

    import threading
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.responses = RESPONSES
            self.gap_s = GAP_S

        def execute(self, requests):
            for request in requests:
                threading.Thread(target=self._stream, args=(request,), daemon=True).start()
            return None

        def _stream(self, request):
            sender = request.get_response_sender()
            for i in range(self.responses):
                out = pb_utils.Tensor("OUT", np.array([f"token {i}".encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
                time.sleep(self.gap_s)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    '''
)

CONFIG = textwrap.dedent(
    """\
    name: "{name}"
    backend: "python"
    max_batch_size: 0
    model_transaction_policy {{ decoupled: true }}
    input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
    output [ {{ name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }} ]
    instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
    """
)


@dataclass(frozen=True)
class Setup:
    streams: int
    responses: int
    gap_ms: float
    models: int
    instances: int
    kill_after_s: float
    watch_s: float
    kill_models: int
    busy: int
    cpus: str


@dataclass
class Round:
    number: int
    outcome: str = "survived"  # survived | aborted at start | aborted at kill | aborted while streaming
    responses_before_kill: int = 0
    stubs_killed: int = 0
    detail: str = ""


def write_repository(root: Path, setup: Setup) -> list[str]:
    names = [f"stream_{i}" for i in range(setup.models)]
    source = MODEL_PY.replace("RESPONSES", str(setup.responses)).replace("GAP_S", repr(setup.gap_ms / 1000))
    for name in names:
        version = root / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (version / "model.py").write_text(source)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, instances=setup.instances))
    return names


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((LOCALHOST, 0))
        port: int = probe.getsockname()[1]
        return port


def environment() -> dict[str, str]:
    """The venv first on PATH (the stub finds its Python packages only so), the wheel's libraries."""
    libs = Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"
    libpython = sysconfig.get_config_var("LIBDIR") or ""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(libs), libpython, env.get("LD_LIBRARY_PATH", "")) if p
    )
    return env


@contextlib.contextmanager
def server(
    tree: Path, repository: Path, log_path: Path, shm_prefix: str, cpus: str
) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """tritonserver on `repository` (on the CPUs `cpus` names, taskset's list, where not empty),
    killed with all its stubs when the block ends."""
    http, grpc = free_port(), free_port()
    command = [
        *(["taskset", "-c", cpus] if cpus else []),
        str(tree / "bin" / "tritonserver"),
        f"--model-repository={repository}",
        f"--backend-directory={tree / 'backends'}",
        f"--http-address={LOCALHOST}",
        f"--http-port={http}",
        f"--grpc-address={LOCALHOST}",
        f"--grpc-port={grpc}",
        "--allow-metrics=false",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        "--log-info=true",
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, env=environment(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process, http, grpc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for region in Path("/dev/shm").glob(f"{shm_prefix}*"):
            with contextlib.suppress(OSError):
                region.unlink()


def ready(http: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOCALHOST}:{http}/v2/health/ready", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def stubs_of(server_pid: int, model: str) -> list[int]:
    """The stub processes whose command line names `model` (children of the server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        words = [word.decode(errors="replace") for word in cmdline]
        named = any(f"/{model}/" in word for word in words)
        if parent == server_pid and words and words[0].endswith(STUB_NAME) and named:
            found.append(int(entry.name))
    return found


def aborted(process: subprocess.Popen[bytes], log_path: Path) -> str:
    """Empty while the server runs and its log names no abort; else what shows it (its exit status,
    once it has ended within a few seconds, and the abort's marks in its log)."""
    log = log_path.read_text(errors="replace")
    if process.poll() is None and not any(mark in log for mark in ABORT_MARKS):
        return ""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)
    log = log_path.read_text(errors="replace")
    marks = [mark for mark in ABORT_MARKS if mark in log]
    return f"exit {process.poll()}; log: {', '.join(marks) or 'no abort line'}"


class Streams:
    """`count` gRPC streams, one request each, counting the responses they receive."""

    def __init__(self, grpc: int, models: list[str], count: int) -> None:
        self.clients = [grpcclient.InferenceServerClient(f"{LOCALHOST}:{grpc}") for _ in range(count)]
        self.received = 0
        self.errors: list[str] = []
        self.lock = threading.Lock()
        for i, client in enumerate(self.clients):
            client.start_stream(callback=self._callback)
            data = grpcclient.InferInput("IN", [1], "INT32")
            data.set_data_from_numpy(np.array([i], dtype=np.int32))
            client.async_stream_infer(models[i % len(models)], [data], request_id=str(i))

    def _callback(self, result: object, error: object) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(str(error)[:120])
            else:
                self.received += 1

    def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                client.stop_stream(cancel_requests=True)
            with contextlib.suppress(Exception):
                client.close()


def run_round(number: int, tree: Path, workdir: Path, setup: Setup) -> Round:
    """One fresh server: start it, stream, kill the stubs, watch; the server is gone at the end."""
    result = Round(number)
    round_dir = workdir / f"round_{number:03d}"
    models = write_repository(round_dir / "models", setup)
    log_path = round_dir / "tritonserver.log"
    prefix = f"abort-probe-{os.getpid()}-{number}"
    with server(tree, round_dir / "models", log_path, prefix, setup.cpus) as (process, http, grpc):
        deadline = time.monotonic() + 120
        while not ready(http):
            if (why := aborted(process, log_path)) or time.monotonic() > deadline:
                result.outcome, result.detail = "aborted at start", why or "not ready in 120 s"
                return result
            time.sleep(0.2)
        spin = [*(["taskset", "-c", setup.cpus] if setup.cpus else []), sys.executable, "-c"]
        busy = [subprocess.Popen([*spin, "while True: pass"]) for _ in range(setup.busy)]
        streams = Streams(grpc, models, setup.streams)
        try:
            time.sleep(setup.kill_after_s)
            result.responses_before_kill = streams.received
            if why := aborted(process, log_path):
                result.outcome, result.detail = "aborted while streaming", why
                return result
            victims = [pid for model in models[: setup.kill_models] for pid in stubs_of(process.pid, model)]
            for pid in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            result.stubs_killed = len(victims)
            end = time.monotonic() + setup.watch_s
            while time.monotonic() < end:
                if why := aborted(process, log_path):
                    result.outcome = "aborted at kill" if victims else "aborted while streaming"
                    result.detail = why
                    return result
                time.sleep(0.1)
            if setup.kill_models and not victims:
                result.outcome = "no stub found"
        finally:
            for spinner in busy:
                spinner.kill()
                spinner.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            streams.close()
    return result


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10, help="fresh servers, one kill each")
    parser.add_argument("--streams", type=int, default=12, help="concurrent gRPC streams")
    parser.add_argument("--responses", type=int, default=100000, help="responses per request")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="sleep between two responses")
    parser.add_argument("--models", type=int, default=4, help="models in the repository")
    parser.add_argument("--instances", type=int, default=1, help="instances of each model")
    parser.add_argument("--kill-after", type=float, default=2.0, help="seconds of streaming first")
    parser.add_argument("--watch", type=float, default=3.0, help="seconds to watch after the kill")
    parser.add_argument(
        "--busy", type=int, default=0, help="processes spinning on the CPU while the streams run"
    )
    parser.add_argument(
        "--cpus", default="", help="run the server (and the spinners) on these CPUs (taskset -c)"
    )
    parser.add_argument(
        "--kill-models",
        type=int,
        default=4,
        help="models whose stubs (every instance's) are killed; 0 streams only",
    )
    parser.add_argument("--workdir", type=Path, help="keep the rounds' logs here")
    return parser.parse_args()


def main() -> int:
    args = parse()
    setup = Setup(
        args.streams,
        args.responses,
        args.gap_ms,
        args.models,
        args.instances,
        args.kill_after,
        args.watch,
        args.kill_models,
        args.busy,
        args.cpus,
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="python-backend-abort-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tree = prepare_server_tree(workdir)
    print(f"{setup}; logs in {workdir}", flush=True)
    outcomes = []
    for number in range(1, args.rounds + 1):
        started = time.monotonic()
        result = run_round(number, tree, workdir, setup)
        outcomes.append(result.outcome)
        print(
            f"round {number}: {result.outcome} ({result.responses_before_kill} responses, then"
            f" {result.stubs_killed} stubs killed; {time.monotonic() - started:.1f} s)"
            + (f" {result.detail}" if result.detail else ""),
            flush=True,
        )
    count = sum(outcome.startswith("aborted") for outcome in outcomes)
    print(f"aborted {count} of {args.rounds}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
