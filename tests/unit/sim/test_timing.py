"""Timing model and hardware assumptions against the published lines they are built from."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.sim.hardware import Execution, kv_capacity_tokens, model_spec, tp_speedup
from rps_harness.sim.timing import fit_lines, timing_from_lines
from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.profiles.reference import reference_model
from rps_serve.requests import Modality

MODEL = "llava-onevision-qwen2-7b"


def test_a_lone_prefill_step_takes_the_published_line() -> None:
    lines = reference_model(MODEL).lines
    timing = timing_from_lines(lines, model_spec(MODEL), gpus=1)
    for tokens in (50, 800, 5000):
        assert timing.step_s(tokens, 0, 0, 0.0) == pytest.approx(lines[Modality.TEXT].seconds(tokens))
    # An image or video alone: its modality's line, up to its question tokens at the text slope.
    for modality, visual, question in ((Modality.IMAGE, 2916, 40), (Modality.VIDEO, 6272, 40)):
        prompt = np.array([visual + question])
        isolated = timing.isolated_ttft_s(np.array([modality.index]), prompt, np.array([visual]), 8192)[0]
        line = lines[modality].seconds(float(prompt[0]))
        slack = question * abs(lines[modality].slope - lines[Modality.TEXT].slope)
        assert abs(isolated - line) <= slack + 1e-12


def test_decode_steps_grow_with_batch_and_context() -> None:
    timing = timing_from_lines(reference_model(MODEL).lines, model_spec(MODEL), gpus=1)
    one = timing.step_s(0, 1, 1000, 0.0)
    assert 0.004 < one < 0.015  # a 7B decode step on an H100 takes milliseconds
    assert timing.step_s(0, 64, 1000, 0.0) > one
    assert timing.step_s(0, 1, 100_000, 0.0) > one


def test_tensor_parallelism_speeds_up_every_term() -> None:
    spec = model_spec(MODEL)
    lines = reference_model(MODEL).lines
    one, four = (timing_from_lines(lines, spec, gpus=g) for g in (1, 4))
    assert four.token_s == pytest.approx(one.token_s / tp_speedup(4))
    assert four.decode_step_s == pytest.approx(one.decode_step_s / tp_speedup(4))
    assert 1 < tp_speedup(2) < 2 and 2 < tp_speedup(4) < 4


@pytest.mark.parametrize("gpus", [1, 4])
def test_eager_mode_adds_the_kernel_launches_to_every_step(gpus: int) -> None:
    spec, lines = model_spec(MODEL), reference_model(MODEL).lines
    graph = timing_from_lines(lines, spec, gpus)
    eager = timing_from_lines(lines, spec, gpus, execution=Execution.EAGER)
    overhead = spec.step_overhead_s(Execution.EAGER)
    assert overhead > 0 and spec.step_overhead_s(Execution.GRAPH) == 0
    for step in ((0, 1, 1000, 0.0), (0, 256, 500_000, 0.0), (4096, 32, 50_000, 0.01)):
        assert eager.step_s(*step) == pytest.approx(graph.step_s(*step) + overhead)
    # A lone prefill pays it once per chunk.
    modality, prompt, visual = np.array([0]), np.array([20_000]), np.array([0])
    chunks = -(-20_000 // 8192)
    assert eager.isolated_ttft_s(modality, prompt, visual, 8192)[0] == pytest.approx(
        graph.isolated_ttft_s(modality, prompt, visual, 8192)[0] + chunks * overhead
    )


def test_kv_capacity_needs_the_weights_to_fit() -> None:
    assert kv_capacity_tokens(model_spec(MODEL), 1) > 500_000
    with pytest.raises(ValueError, match="use more GPUs"):
        kv_capacity_tokens(model_spec("llava-onevision-qwen2-72b"), 1)
    assert kv_capacity_tokens(model_spec("llava-onevision-qwen2-72b"), 4) > 0


def test_fitted_lines_recover_the_text_line_of_a_profile() -> None:
    records = reference_profile(MODEL, per_kind=400, seed=4)
    fitted = fit_lines(records)[Modality.TEXT]
    published = reference_model(MODEL).lines[Modality.TEXT]
    assert fitted.slope == pytest.approx(published.slope, rel=0.05)
    assert fitted.seconds(1000) == pytest.approx(published.seconds(1000), rel=0.05)
