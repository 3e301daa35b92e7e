"""A gate in front of the repository's real `vllm_model`, for tests that need requests in flight for
as long as they want, whatever the machine's speed.

`Gate.model_source()` is a `vllm_model` (the served one, subclassed) that keeps a request asking for
exactly `Gate.tokens` output tokens, once admitted (counted in its `pending`), waiting while the gate
is closed, without a response and without blocking the model's loop; it reports each such request
with a `held-*` file in the gate's folder. Opened, the gate lets them on to be served as any other.
A test picks a number of tokens that none of its other requests asks for (`rps-serve bench`'s
warm-up requests ask for 4), so that the gate holds its own requests and nothing else."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

_GATED_MODEL = '''
import asyncio
import locale
import uuid
from pathlib import Path

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

import triton_python_backend_utils as pb_utils

from rps_serve.triton import protocol as p
from rps_serve.triton.backend import tensor_getter
from rps_serve.triton.vllm_model import TritonPythonModel as Served

GATE = Path({directory!r})
HELD_TOKENS = {tokens!r}


class TritonPythonModel(Served):
    """The real vllm_model. A request asking for HELD_TOKENS output tokens, once admitted, reports
    itself with a `held-*` file in GATE and waits while GATE/closed exists, on the model's loop
    without blocking it; then it is served as any other."""

    async def _generate(self, request, sender):
        sampling = p.parse_request(tensor_getter(pb_utils, request)).sampling_parameters
        if sampling.get("max_tokens") == HELD_TOKENS:
            (GATE / f"held-{{uuid.uuid4().hex}}").touch()
            while (GATE / "closed").exists():
                await asyncio.sleep(0.05)
        await super()._generate(request, sender)
'''


class Gate:
    """The test's side of the gate: its folder and the output length it holds."""

    def __init__(self, directory: Path, tokens: int) -> None:
        self.directory = directory
        self.tokens = tokens
        self.closed = directory / "closed"

    def model_source(self) -> str:
        """The gated `vllm_model`'s `model.py`."""
        return _GATED_MODEL.format(directory=str(self.directory), tokens=self.tokens)

    def close(self) -> None:
        for held in self.directory.glob("held-*"):
            held.unlink()
        self.closed.touch()

    def open(self) -> None:
        self.closed.unlink(missing_ok=True)

    def held(self) -> int:
        """How many requests have reached the gate since it was closed."""
        return len(list(self.directory.glob("held-*")))

    def wait_held(self, count: int, healthy: Callable[[], None], timeout_s: float = 300) -> None:
        """Wait until `count` requests are at the gate, calling `healthy` (which raises where the
        requests can no longer get there) between looks."""
        deadline = time.monotonic() + timeout_s
        while self.held() < count:
            assert time.monotonic() < deadline, f"{self.held()} of {count} requests reached the gate"
            healthy()
            time.sleep(0.05)
