"""Readiness and liveness probes for orchestrators: `python3 -m rps_serve.probe ready|live`.

Exit status 0 when the check passes, 1 (with the reason on stderr) when it fails. Each check is one
local HTTP request, a health request to `vllm_model` (`names.HEALTH`), which its stub answers at
once, whatever the load, with its engine's state (`engine_supervisor.EngineState`). A dead stub cannot
answer: Triton 2.51 keeps its model "ready" but answers for it "Stub process ... is not healthy", and
says the same within about a second of a request's arrival for a stub that is alive but hung (stopped,
say: Triton's health check of the stub times out; such a server aborts when the stub resumes, see
docs/limits-and-guarantees.md); a server that does not answer within `TIMEOUT_S` fails the check as
well. (Later releases report such a
model not ready, python_backend r25.12, and ask `vllm_model.is_ready()`, r26.03, the image's 26.10
among them; the probes stay there: readiness cannot tell a restart in place from a dead replica.)
- `ready`: `vllm_model` can serve now: its stub answers and its engine serves. It fails while the
  engine restarts in place (requests are refused then as retryable), so traffic goes elsewhere.
- `live`: the replica serves, or will serve again by itself: its stub answers and its engine serves
  or is restarting within its deadline. It fails only where nothing inside the server can recover:
  a dead stub (Triton never restarts one, and its requests in flight hang until the server goes), an
  engine still down past its restart deadline (`overdue`) or given up (`failed`), a model Triton
  no longer serves; the orchestrator should then replace the server at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

from rps_serve.triton import names as p
from rps_serve.triton.engine_supervisor import EngineState

TIMEOUT_S = 4.0
# Triton's words for a model whose Python-backend stub is dead or hung.
STUB_UNHEALTHY = "is not healthy"
HEALTH_BODY: dict[str, object] = {p.HEALTH: True}


class ProbeFailed(RuntimeError):
    """The check failed; the message says why."""


def _post(url: str, body: dict[str, object]) -> tuple[int, str]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return int(reply.status), reply.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        raise ProbeFailed(f"{url} does not answer: {error}") from None


def engine_state(http: str, model: str = p.VLLM_MODEL) -> EngineState:
    """The state `model`'s stub reports for its engine; `ProbeFailed` where the stub cannot say."""
    status, body = _post(f"http://{http}/v2/models/{model}/generate", HEALTH_BODY)
    return parse_health(status, body, model)


def parse_health(status: int, body: str, model: str = p.VLLM_MODEL) -> EngineState:
    """The engine state in Triton's answer (`status`, JSON `body`) to a health request to `model`."""
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ProbeFailed(f"{model} answered a health request with HTTP {status}: {body[:200]}")
    state = answer.get(p.ENGINE_STATE)
    if isinstance(state, list) and len(state) == 1:
        state = state[0]
    if status == 200 and state in {s.value for s in EngineState}:
        return EngineState(state)
    error = str(answer.get("error", body))
    if STUB_UNHEALTHY in error:
        raise ProbeFailed(f"{model}'s stub is not healthy (dead, or hung past Triton's check): {error}")
    raise ProbeFailed(f"{model} did not report its engine's state (HTTP {status}): {error}")


def check_ready(http: str, model: str = p.VLLM_MODEL) -> None:
    state = engine_state(http, model)
    if state is not EngineState.SERVING:
        raise ProbeFailed(f"{model} cannot serve now: its vLLM engine is {state.value}")


def check_live(http: str, model: str = p.VLLM_MODEL) -> None:
    state = engine_state(http, model)
    if not state.recovering:
        raise ProbeFailed(
            f"{model}'s vLLM engine is {state.value}: it will not serve again without a new server"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m rps_serve.probe", description="Readiness and liveness probes"
    )
    parser.add_argument("check", choices=["ready", "live"])
    parser.add_argument("--http", default="localhost:8000", help="Triton's HTTP host:port")
    parser.add_argument("--model", default=p.VLLM_MODEL)
    args = parser.parse_args(argv)
    try:
        if args.check == "ready":
            check_ready(args.http, args.model)
        else:
            check_live(args.http, args.model)
    except ProbeFailed as failed:
        sys.stderr.write(f"{args.check} probe failed: {failed}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
