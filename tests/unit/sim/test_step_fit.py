"""The step-time fit on synthetic steps with known terms, and the run log's steps read into columns."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.sim.step_fit import (
    TERM_NAMES,
    Steps,
    design,
    fit_steps,
    loaded_steps,
    score,
    simulator_step_s,
    steps_from_records,
)
from rps_harness.sim.timing import TimingModel
from rps_serve.profiles.reference import PrefillLine

TRUE = {
    "step": 3.5e-3,
    "prefill_step": 1e-2,
    "prefill_request": 8e-3,
    "prefill_token": 1.5e-4,
    "decode_request": 2e-4,
    "kv_token": 8e-7,
    "chunk_context": 1e-9,
    "encoder_input": 3e-2,
    "encoder_token": 1e-4,
}


def _steps(rng: np.random.Generator, n: int = 6000) -> Steps:
    prefill_requests = rng.choice([0, 0, 0, 1, 2], size=n)
    prefill_tokens = np.where(prefill_requests > 0, rng.integers(16, 2048, size=n), 0)
    encoder = np.where(prefill_requests > 0, rng.choice([0, 0, 1, 2], size=n), 0)
    decodes = rng.integers(0, 24, size=n)
    kv = prefill_tokens + rng.integers(0, 40_000, size=n)
    return Steps(
        step_s=np.zeros(n),
        gap_s=np.full(n, np.nan),
        prefill_tokens=prefill_tokens.astype(float),
        prefill_requests=prefill_requests.astype(float),
        decode_requests=decodes.astype(float),
        encoder_inputs=encoder.astype(float),
        kv_tokens=kv.astype(float),
        running=(decodes + prefill_requests).astype(float),
        run=np.full(n, "synthetic"),
    )


def _timed(steps: Steps, rng: np.random.Generator, noise: float = 0.05) -> Steps:
    exact = design(steps, TERM_NAMES) @ np.array([TRUE[t] for t in TERM_NAMES])
    timed = exact * rng.lognormal(0.0, noise, size=len(steps))
    return Steps(**{**steps.__dict__, "step_s": timed})


def test_fit_recovers_every_term_within_tolerance() -> None:
    rng = np.random.default_rng(0)
    steps = _timed(_steps(rng), rng)
    model = fit_steps(steps, TERM_NAMES)
    for term, value in model.named().items():
        assert value == pytest.approx(TRUE[term], rel=0.25), term
    assert score(steps.step_s, model.predict(steps)).r2 > 0.98


def test_fit_recovers_terms_relative() -> None:
    rng = np.random.default_rng(1)
    steps = _timed(_steps(rng), rng)
    model = fit_steps(steps, TERM_NAMES, relative=True)
    for term, value in model.named().items():
        assert value == pytest.approx(TRUE[term], rel=0.25), term


@pytest.mark.parametrize("dropped", TERM_NAMES)
def test_dropping_a_term_that_is_there_worsens_the_fit(dropped: str) -> None:
    rng = np.random.default_rng(2)
    steps = _timed(_steps(rng), rng, noise=0.01)
    kept = [t for t in TERM_NAMES if t != dropped]

    def error(terms: list[str]) -> float:  # mean squared relative error
        predicted = fit_steps(steps, terms, relative=True).predict(steps)
        return float(np.mean(((steps.step_s - predicted) / steps.step_s) ** 2))

    assert error(kept) > 1.5 * error(list(TERM_NAMES))


def test_terms_are_never_negative() -> None:
    rng = np.random.default_rng(3)
    steps = _steps(rng)
    # Time that falls with decodes: least squares would give that term a negative coefficient.
    timed = Steps(
        **{**steps.__dict__, "step_s": 0.05 - 1e-3 * steps.decode_requests + 1e-4 * steps.prefill_tokens}
    )
    model = fit_steps(timed, ["step", "prefill_token", "decode_request"])
    assert (model.coefficients >= 0).all()
    assert model.named()["decode_request"] == 0.0


def test_fit_refuses_fewer_steps_than_terms() -> None:
    steps = _steps(np.random.default_rng(4), n=3)
    with pytest.raises(ValueError, match="cannot fix"):
        fit_steps(steps, TERM_NAMES)


def test_unknown_term_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown step terms"):
        design(_steps(np.random.default_rng(5), n=10), ["step", "warp_drive"])


def test_run_log_records_become_steps() -> None:
    records = [
        {"kind": "lag", "t": 0.5, "lag_s": 0.001},
        {"kind": "step", "t": 1.0, "running": 1, "waiting": 0, "kv": 0.0},  # no details: skipped
        {
            "kind": "step", "t": 1.010, "running": 2, "waiting": 0, "kv": 0.5, "preempted": 0,
            "step_ms": 8.0, "prefill_requests": 1, "prefill_tokens": 100, "decode_requests": 1,
            "decode_tokens": 1, "encoder_inputs": 1,
        },
        {
            "kind": "step", "t": 1.020, "running": 0, "waiting": 0, "kv": 0.25, "preempted": 0,
            "step_ms": 6.0, "prefill_requests": 0, "prefill_tokens": 0, "decode_requests": 2,
            "decode_tokens": 2, "encoder_inputs": 0,
        },
        {
            "kind": "step", "t": 3.0, "running": 1, "waiting": 0, "kv": 0.0, "preempted": 0,
            "step_ms": 5.0, "prefill_requests": 1, "prefill_tokens": 10, "decode_requests": 0,
            "decode_tokens": 0, "encoder_inputs": 0,
        },
    ]  # fmt: skip
    steps = steps_from_records(records, "run-a", kv_capacity_tokens=1000)
    assert len(steps) == 3
    np.testing.assert_allclose(steps.step_s, [0.008, 0.006, 0.005])
    np.testing.assert_allclose(steps.kv_tokens, [500, 250, 0])
    np.testing.assert_allclose(steps.prefill_tokens, [100, 0, 10])
    np.testing.assert_allclose(steps.decode_requests, [1, 2, 0])
    # Busy before the first two (a request was running), idle before the last: its wait is no gap.
    np.testing.assert_allclose(steps.gap_s[:2], [0.002, 0.004], atol=1e-9)
    assert np.isnan(steps.gap_s[2])
    assert set(steps.run) == {"run-a"}
    context = design(steps, ["chunk_context", "encoder_token"])
    np.testing.assert_allclose(context[:, 0], [100 * 400, 0, 0])
    np.testing.assert_allclose(context[:, 1], [100, 0, 0])


def test_simulator_parts_are_the_timing_models_step() -> None:
    timing = TimingModel(
        prefill_step_s=0.004,
        token_s=1e-4,
        decode_step_s=0.005,
        kv_token_s=1e-6,
        encoder=(PrefillLine(0, 0), PrefillLine(0.01, 2e-4), PrefillLine(0.02, 3e-4)),
    )
    steps = _steps(np.random.default_rng(6), n=200)
    total, parts = simulator_step_s(timing, steps, max_num_batched_tokens=2048)
    np.testing.assert_allclose(total, sum(parts.values()))
    plain = steps.encoder_inputs == 0
    expected = [
        timing.step_s(int(p), int(d), int(k), 0.0)
        for p, d, k in zip(
            steps.prefill_tokens[plain], steps.decode_requests[plain], steps.kv_tokens[plain], strict=True
        )
    ]
    np.testing.assert_allclose(total[plain], expected)
    encoded = steps.encoder_inputs > 0
    per_input = steps.prefill_tokens[encoded] / steps.encoder_inputs[encoded]
    np.testing.assert_allclose(
        parts["encoder"][encoded], (0.01 + 2e-4 * per_input) * steps.encoder_inputs[encoded]
    )


def test_loaded_steps_recover_the_simulators_terms_and_add_the_gap_between_steps() -> None:
    rng = np.random.default_rng(3)
    steps = _steps(rng)
    terms = ("step", "prefill_token", "kv_token")
    exact = design(steps, terms) @ np.array([TRUE[t] for t in terms])
    # Encoder steps cost far more: the loaded fit leaves them to the isolated lines.
    exact = exact + np.where(steps.encoder_inputs > 0, 0.2, 0.0)
    gaps = rng.uniform(1e-3, 2e-3, size=len(steps))
    timed = Steps(**{**steps.__dict__, "step_s": exact * rng.lognormal(0.0, 0.03, len(steps)), "gap_s": gaps})
    loaded = loaded_steps(timed)
    assert loaded.step_s == pytest.approx(TRUE["step"] + 1.5e-3, rel=0.1)
    assert loaded.chunk_token_s == pytest.approx(TRUE["prefill_token"], rel=0.05)
    assert loaded.decode_request_s == 0
    assert loaded.kv_token_s == pytest.approx(TRUE["kv_token"], rel=0.1)
