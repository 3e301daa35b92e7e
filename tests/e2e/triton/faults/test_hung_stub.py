"""The `vllm_model` stub hung (SIGSTOP) with a request in flight: both probes fail at once naming the
stub, and `rps-serve bench` counts the request it sent before the hang as lost and exits 1 after its
deadline. The request waits at a gate (`tests.e2e.triton.gate`) once admitted, so the stub is stopped
while it sends nothing. (Stopped once the request was counted admitted, as before the gate, the stub
had once sent a first token by then, and the server ended the bench's stream, "Stream removed", so the
request failed instead of being lost.) The probes under streaming load pass
(`test_stub_death.py::test_stub_killed_under_load`, before its kill). Here no earlier streams run for
nobody ahead of the bench: Triton 2.51 does not flag every cancelled stream, and once, beside six such
streams, the bench's request did not reach `vllm_model` within 300 s.

One server for the module (the shipped policy), used up by the hang: on Triton 2.51 a stub hung while
a request arrives is declared "not healthy", and the server aborts when the stub resumes
(docs/limits-and-guarantees.md, "Triton's Python backend aborts when a stub dies mid-send"), so the
stub is SIGKILLed at the end rather than resumed, and its engine processes follow it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace, write_trace
from tests.e2e.triton.conftest import VLLM_MODEL, Server
from tests.e2e.triton.faults.conftest import (
    fault_server,
    probe_result,
    served_context,
    vllm_model_stub,
)
from tests.e2e.triton.gate import Gate

# More tokens than the bench's deadline lets any machine here generate, were the stub to answer: about
# 75 s at the fastest rate measured, 400 tokens a second a stream. The gate holds requests asking for it.
BENCH_OUTPUT_TOKENS = 30_000
# The bench's deadline after its last request is sent: the hung stub answers nothing, however long.
BENCH_DRAIN_S = 5.0


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate(tmp_path_factory.mktemp("gate"), BENCH_OUTPUT_TOKENS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Gate) -> Iterator[Server]:
    with fault_server(tmp_path_factory, model_files={VLLM_MODEL: gate.model_source()}) as running:
        yield running


def _bench_command(server: Server, directory: Path) -> list[str]:
    """`rps-serve bench` (the console script beside this Python) on a one-request trace: a short text
    asking for `BENCH_OUTPUT_TOKENS` tokens."""
    trace = Trace(
        arrival_s=np.zeros(1),
        kind=np.full(1, list(RequestKind).index(RequestKind.SHORT_TEXT)),
        prompt_tokens=np.full(1, 40),
        modality_tokens=np.zeros(1, dtype=np.int64),
        output_tokens=np.full(1, BENCH_OUTPUT_TOKENS),
    )
    trace_file, slo = directory / "one.jsonl", directory / "slo.json"
    write_trace(trace_file, trace)
    slo.write_text(json.dumps({"text": 1.0, "image": 1.0, "video": 1.0}))
    assert served_context(server) > BENCH_OUTPUT_TOKENS
    script = str(Path(sys.executable).parent / "rps-serve")
    return [script, "bench", "--url", server.endpoints.grpc_url, "--trace", str(trace_file),
            "--model", str(server.model), "--slo", str(slo), "--json", str(directory / "bench.json"),
            "--max-output-tokens", str(BENCH_OUTPUT_TOKENS), "--drain-s", str(BENCH_DRAIN_S),
            "--no-progress"]  # fmt: skip


def test_hung_stub_fails_the_probes_and_bench_counts_its_request_lost(
    server: Server, gate: Gate, tmp_path: Path
) -> None:
    """`rps-serve bench` sends one long request (after its three warm-up requests, which the gate lets
    through); once `vllm_model` has admitted it and holds it at the gate, the stub is stopped, so the
    request cannot be answered however fast the machine. Both probes then fail, naming the stub; the
    bench ends at its deadline (`--drain-s`), reports the request lost and exits 1."""
    stub = vllm_model_stub(server)
    gate.close()
    bench = subprocess.Popen(_bench_command(server, tmp_path))
    try:

        def running() -> None:
            assert bench.poll() is None, "bench ended before its request reached the gate"

        gate.wait_held(1, running)
        os.kill(stub.pid, signal.SIGSTOP)
        for check in ("ready", "live"):
            status, why = probe_result(server, check)
            assert status == 1 and "stub is not healthy" in why, (check, status, why)
        assert bench.wait(timeout=300) == 1
    finally:
        bench.kill()
        # Not resumed: Triton 2.51 aborts when a stub it declared not healthy resumes.
        os.kill(stub.pid, signal.SIGKILL)
    (result,) = json.loads((tmp_path / "bench.json").read_text())["results"].values()
    counts = result["requests"]
    assert counts["sent"] == 1 and counts["lost"] == 1, counts
