"""Readiness and liveness probes for orchestrators: `python3 -m rps_serve.probe ready|live`.

Exit status 0 when the check passes, 1 (with the reason on stderr) when it fails. Standard library only,
so a probe costs an interpreter start and two local HTTP requests.
- `ready`: `vllm_model` is ready in Triton (`/v2/models/vllm_model/ready`); while its engine restarts,
  requests are refused as retryable (Triton 2.51 cannot mark a Python model unready short of unloading it).
- `live`: the server answers, `vllm_model`'s stub answers (Triton 2.51 keeps a model whose stub died
  "ready" and answers its requests "Stub process ... is not healthy"), and its engine is up
  (`rps_engine_up`). An engine restart also fails `live` for its duration: size the orchestrator's
  failure threshold above an engine start, so that only an engine that stays dead restarts the pod.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

from rps_serve.triton import protocol as p

TIMEOUT_S = 4.0
# Triton's words for a model whose Python-backend stub is dead.
STUB_DEAD = "is not healthy"
# A request `vllm_model` refuses as malformed before it reaches the engine: it proves the stub answers.
PROBE_BODY: dict[str, object] = {p.TEXT_INPUT: "", p.SAMPLING_PARAMETERS: "{"}


class ProbeFailed(RuntimeError):
    """The check failed; the message says why."""


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            return int(reply.status), reply.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        raise ProbeFailed(f"{url} does not answer: {error}") from None


def _post(url: str, body: dict[str, object]) -> str:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return str(reply.read().decode(errors="replace"))
    except urllib.error.HTTPError as error:
        return str(error.read().decode(errors="replace"))
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        raise ProbeFailed(f"{url} does not answer: {error}") from None


def check_ready(http: str, model: str = p.VLLM_MODEL) -> None:
    status, body = _get(f"http://{http}/v2/models/{model}/ready")
    if status != 200:
        raise ProbeFailed(f"{model} is not ready (HTTP {status}) {body}".strip())


def engine_up(metrics: str, model: str = p.VLLM_MODEL) -> bool | None:
    """`rps_engine_up` of `model` on the metrics endpoint; None where the series is absent."""
    status, text = _get(f"http://{metrics}/metrics")
    if status != 200:
        raise ProbeFailed(f"metrics endpoint answered HTTP {status}")
    return parse_engine_up(text, model)


def parse_engine_up(exposition: str, model: str = p.VLLM_MODEL) -> bool | None:
    """`rps_engine_up` of `model` in a Prometheus text exposition; None where the series is absent."""
    prefix = f'rps_engine_up{{model="{model}"}} '
    for line in exposition.splitlines():
        if line.startswith(prefix):
            return float(line.removeprefix(prefix)) != 0
    return None


def check_live(http: str, metrics: str, model: str = p.VLLM_MODEL) -> None:
    status, _ = _get(f"http://{http}/v2/health/live")
    if status != 200:
        raise ProbeFailed(f"server not live (HTTP {status})")
    answer = _post(f"http://{http}/v2/models/{model}/generate", PROBE_BODY)
    if STUB_DEAD in answer:
        raise ProbeFailed(f"{model}'s stub is dead: {answer}")
    if engine_up(metrics, model) is False:
        raise ProbeFailed(f"{model}'s vLLM engine is down (rps_engine_up 0)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m rps_serve.probe", description="Readiness and liveness probes"
    )
    parser.add_argument("check", choices=["ready", "live"])
    parser.add_argument("--http", default="localhost:8000", help="Triton's HTTP host:port")
    parser.add_argument("--metrics", default="localhost:8002", help="Triton's metrics host:port")
    parser.add_argument("--model", default=p.VLLM_MODEL)
    args = parser.parse_args(argv)
    try:
        if args.check == "ready":
            check_ready(args.http, args.model)
        else:
            check_live(args.http, args.metrics, args.model)
    except ProbeFailed as failed:
        sys.stderr.write(f"{args.check} probe failed: {failed}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
