"""The step-composition analysis of a fidelity run: decode-request seconds, batch means, scaled terms."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from benchmarks.fidelity_steps import StepComposition, real_steps, scaled


def test_decode_seconds_split_by_step_kind() -> None:
    steps = StepComposition(np.array([0.01, 0.2, 0.02]), np.array([0, 500, 0]), np.array([2, 3, 4]))
    decode_only, with_prefill = steps.decode_seconds()
    assert decode_only == pytest.approx(2 * 0.01 + 4 * 0.02)
    assert with_prefill == pytest.approx(3 * 0.2)
    assert steps.prefill_steps() == (1, pytest.approx(0.2), pytest.approx(3.0))
    assert steps.decode_only_mean_s(2) == (1, pytest.approx(0.01))
    count, mean = steps.decode_only_mean_s(3)  # the only 3-decode step has a prefill
    assert count == 0 and math.isnan(mean)


def test_real_steps_add_the_busy_gap_and_drop_idle_time(tmp_path: Path) -> None:
    log = tmp_path / "run-log.jsonl"
    request = {"kind": "request", "arrival": 10.0}
    work = {"prefill_requests": 0, "encoder_inputs": 0, "kv": 0.0}
    steps = [
        {
            "kind": "step",
            "t": 10.005,
            "step_ms": 5.0,
            "prefill_tokens": 0,
            "decode_requests": 1,
            "running": 1,
        },
        # Ends 1 ms after the first: the engine stayed busy in between.
        {
            "kind": "step",
            "t": 10.011,
            "step_ms": 5.0,
            "prefill_tokens": 0,
            "decode_requests": 1,
            "running": 0,
        },
        # Nothing was running after the second: the ~1 s before this one is the engine idle.
        {"kind": "step", "t": 11.0, "step_ms": 5.0, "prefill_tokens": 8, "decode_requests": 0, "running": 1},
        {"kind": "step", "t": 11.01, "running": 1},  # untimed: left out
    ]
    log.write_text("\n".join(json.dumps(r) for r in [request, *({**work, **s} for s in steps)]) + "\n")
    composed = real_steps(log, requests=1, kv_capacity_tokens=1000)
    np.testing.assert_allclose(composed.duration_s, [0.006, 0.005, 0.005], atol=1e-9)
    np.testing.assert_array_equal(composed.prefill_tokens, [0, 0, 8])
    np.testing.assert_array_equal(composed.decodes, [1, 1, 0])


def test_scaled_scales_the_loaded_terms_only() -> None:
    measured = {
        "name": "stack",
        "loaded_steps": {"step_s": 0.004, "chunk_token_s": 1e-4, "decode_request_s": 0.0, "kv_token_s": 5e-7},
    }
    halved = scaled(measured, 0.5)
    assert halved["loaded_steps"] == {
        "step_s": 0.002,
        "chunk_token_s": 5e-5,
        "decode_request_s": 0.0,
        "kv_token_s": 2.5e-7,
    }
    assert measured["loaded_steps"]["step_s"] == 0.004 and halved["name"] == "stack"
