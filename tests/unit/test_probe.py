"""The liveness probe reads the engine's state from Triton's metrics exposition."""

from __future__ import annotations

from rps_serve.probe import main, parse_engine_up

EXPOSITION = """# HELP rps_engine_up 1 while the vLLM engine can serve
# TYPE rps_engine_up gauge
rps_engine_up{model="vllm_model"} 0
rps_engine_up{model="other"} 1
rps_engine_restarts_total{model="vllm_model"} 2
"""


def test_engine_state_of_the_named_model() -> None:
    assert parse_engine_up(EXPOSITION) is False
    assert parse_engine_up(EXPOSITION, "other") is True
    # A server without the series (an older repository) is not called down.
    assert parse_engine_up(EXPOSITION, "absent") is None


def test_probe_fails_when_nothing_answers() -> None:
    assert main(["live", "--http", "127.0.0.1:1", "--metrics", "127.0.0.1:1"]) == 1
    assert main(["ready", "--http", "127.0.0.1:1"]) == 1
