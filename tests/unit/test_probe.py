"""The probes read the engine's state from `vllm_model`'s answer to a health request: `ready` passes
only while the engine serves, `live` fails only where the replica cannot recover by itself."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from rps_serve.probe import main
from rps_serve.triton import protocol as p

# What Triton 2.51 answers for a model whose stub died, and for one it no longer serves.
STUB_DEAD = (400, {"error": "Stub process 'vllm_model_0_0' is not healthy."})
UNLOADED = (400, {"error": "Request for unknown model: 'vllm_model' is not found"})


def _state(state: str) -> tuple[int, dict[str, object]]:
    return 200, {"model_name": p.VLLM_MODEL, "model_version": "1", p.ENGINE_STATE: state}


class _Triton(BaseHTTPRequestHandler):
    answer: ClassVar[tuple[int, dict[str, object]]] = _state("serving")
    asked: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        assert self.path == f"/v2/models/{p.VLLM_MODEL}/generate"
        type(self).asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        status, body = type(self).answer
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def triton() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Triton)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()


@pytest.mark.parametrize(
    ("answer", "ready", "live"),
    [
        (_state("serving"), 0, 0),
        (_state("restarting"), 1, 0),  # out of the Service, not killed: it recovers by itself
        (_state("overdue"), 1, 1),
        (_state("failed"), 1, 1),
        (STUB_DEAD, 1, 1),
        (UNLOADED, 1, 1),
        ((200, {p.ENGINE_STATE: "unheard-of"}), 1, 1),
    ],
)
def test_each_state_passes_or_fails_each_probe(
    triton: str,
    answer: tuple[int, dict[str, object]],
    ready: int,
    live: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _Triton.answer, _Triton.asked = answer, []
    assert main(["ready", "--http", triton]) == ready
    assert main(["live", "--http", triton]) == live
    assert _Triton.asked == [{p.HEALTH: True}] * 2
    if answer is STUB_DEAD:
        assert "stub is not healthy" in capsys.readouterr().err


def test_probe_fails_when_nothing_answers() -> None:
    assert main(["live", "--http", "127.0.0.1:1"]) == 1
    assert main(["ready", "--http", "127.0.0.1:1"]) == 1


@pytest.mark.slow
def test_the_command_line_the_image_runs_needs_only_the_standard_library(triton: str) -> None:
    """`python3 -m rps_serve.probe` as the image's probes run it, a fresh process every few seconds:
    it answers from the health request and imports nothing outside the standard library (numpy alone
    is hundreds of files to read at every start)."""
    _Triton.answer = _state("serving")
    command = [sys.executable, "-m", "rps_serve.probe", "ready", "--http", triton]
    assert subprocess.run(command, timeout=60, check=False).returncode == 0
    # What this interpreter loads at start (a venv's .pth files may import packages) is not the probe's.
    modules = (
        "import sys; before = set(sys.modules); import rps_serve.probe; "
        "print(sorted({m.split('.')[0] for m in set(sys.modules) - before}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", modules], timeout=60, check=True, capture_output=True, text=True
    )
    outside = set(ast.literal_eval(loaded.stdout)) - set(sys.stdlib_module_names) - {"rps_serve"}
    assert not outside, f"the probe imports {sorted(outside)}"
