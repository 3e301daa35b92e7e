"""Mixes, arrival processes and trace files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rps_harness.workload.arrivals import gamma_arrivals, poisson_arrivals
from rps_harness.workload.mixes import MIXES, Mix, mix_by_name
from rps_harness.workload.shapes import (
    SERVING,
    SHAPES,
    VIDEO_TOKENS_PER_FRAME,
    RequestKind,
    sample_tokens,
)
from rps_harness.workload.trace import generate_trace, mix_counts, read_trace, write_trace

# The paper's mixes: (short text, long text, image, video).
PAPER_MIXES = {
    "mixed-i": (0.60, 0.25, 0.10, 0.05),
    "mixed-ii": (0.50, 0.25, 0.15, 0.10),
    "mixed-iii": (0.40, 0.30, 0.20, 0.10),
    "mixed-iv": (0.35, 0.25, 0.25, 0.15),
    "mixed-v": (0.30, 0.20, 0.30, 0.20),
}


def test_mixes_are_the_papers() -> None:
    for name, fractions in PAPER_MIXES.items():
        assert mix_by_name(name).fractions == (*fractions, 0.0, 0.0, 0.0)  # no document, thumbnail, clip
    assert mix_by_name("mixed-iii").share(RequestKind.VIDEO) == 0.10
    with pytest.raises(ValueError, match="sum to 1"):
        Mix("bad", 0.5, 0.5, 0.5, 0.0)
    with pytest.raises(ValueError, match="unknown mix"):
        mix_by_name("mixed-vi")


@pytest.mark.parametrize("name", [*PAPER_MIXES, "cost-vs-modality"])
def test_trace_follows_mix_proportions(name: str) -> None:
    n = 20_000
    trace = generate_trace(MIXES[name], rate=10.0, n=n, seed=3)
    observed = np.bincount(trace.kind, minlength=len(RequestKind)) / n
    # Binomial standard error is at most 0.0035 at n = 20,000: 0.015 is over four of them.
    assert np.allclose(observed, MIXES[name].fractions, atol=0.015)


@pytest.mark.parametrize("name", ["mixed-v", "cost-vs-modality"])
def test_trace_token_counts_match_kinds(name: str) -> None:
    trace = generate_trace(MIXES[name], rate=10.0, n=2_000, seed=1)
    kinds = list(RequestKind)
    for index, kind in enumerate(kinds):
        rows = trace.kind == index
        assert np.all(trace.modality[rows] == kind.modality.index)
        if kind.modality.value == "text":
            assert np.all(trace.modality_tokens[rows] == 0)
        else:
            assert np.all(trace.modality_tokens[rows] > 0)
    assert np.all(trace.prompt_tokens >= trace.modality_tokens)
    assert np.all(trace.output_tokens >= 1)


def test_seed_fixes_the_trace() -> None:
    a = generate_trace(MIXES["mixed-iii"], 5.0, 500, seed=7)
    b = generate_trace(MIXES["mixed-iii"], 5.0, 500, seed=7)
    c = generate_trace(MIXES["mixed-iii"], 5.0, 500, seed=8)
    for column in ("arrival_s", "kind", "prompt_tokens", "modality_tokens", "output_tokens"):
        assert np.array_equal(getattr(a, column), getattr(b, column))
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_poisson_rate_and_gamma_burstiness() -> None:
    rng = np.random.default_rng(0)
    n = 50_000
    gaps = np.diff(poisson_arrivals(8.0, n, rng), prepend=0.0)
    assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)
    bursty = np.diff(gamma_arrivals(8.0, 3.0, n, rng), prepend=0.0)
    assert bursty.mean() == pytest.approx(1 / 8.0, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(3.0, rel=0.1)
    assert np.all(np.diff(gamma_arrivals(2.0, 0.5, 100, rng)) >= 0)
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, 10, rng)


def test_trace_file_round_trip(tmp_path: Path) -> None:
    trace = generate_trace(MIXES["mixed-ii"], 3.0, 300, seed=2, burst_cv=2.0)
    path = tmp_path / "trace.jsonl"
    write_trace(path, trace)
    back = read_trace(path)
    assert np.allclose(back.arrival_s, trace.arrival_s)
    for column in ("kind", "prompt_tokens", "modality_tokens", "output_tokens"):
        assert np.array_equal(getattr(back, column), getattr(trace, column))
    first = path.read_text().splitlines()[0]
    assert '"modality"' in first and '"kind"' in first


def test_broken_trace_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '{"arrival_s": 0.1, "kind": "text", "prompt_tokens": 5, "modality_tokens": 0, '
        '"output_tokens": 3}\n{"kind": "audio"}\n'
    )
    with pytest.raises(ValueError, match=r"trace.jsonl:2: not a trace record"):
        read_trace(path)


def test_serving_videos_have_the_32_frames_vllm_samples() -> None:
    sample = sample_tokens(RequestKind.VIDEO, 500, np.random.default_rng(0), SERVING)
    # LLaVA-OneVision: 196 pooled tokens per frame and one newline token after the last frame.
    assert set(sample.modality_tokens.tolist()) == {32 * VIDEO_TOKENS_PER_FRAME + 1}
    assert np.all(sample.prompt_tokens > sample.modality_tokens)


# The answer lengths the serving shapes aim at: the datasets' ranges (workload/shapes.py).
ANSWER_RANGES = {
    RequestKind.SHORT_TEXT: (250, 290),
    RequestKind.LONG_TEXT: (370, 425),
    RequestKind.IMAGE: (120, 150),
    RequestKind.VIDEO: (500, 700),
}


@pytest.mark.parametrize("kind", list(ANSWER_RANGES))
def test_serving_answers_fall_in_their_datasets_ranges(kind: RequestKind) -> None:
    low, high = ANSWER_RANGES[kind]
    outputs = sample_tokens(kind, 50_000, np.random.default_rng(1), SERVING).output_tokens
    assert low <= outputs.mean() <= high


@pytest.mark.parametrize("shapes", list(SHAPES))
def test_shapes_change_token_counts_not_the_mix(shapes: str) -> None:
    trace = generate_trace(MIXES["mixed-iii"], rate=10.0, n=2_000, seed=5, shapes=shapes)
    baseline = generate_trace(MIXES["mixed-iii"], rate=10.0, n=2_000, seed=5)
    assert np.array_equal(trace.kind, baseline.kind)
    assert np.all(trace.prompt_tokens >= trace.modality_tokens)


@pytest.mark.parametrize("n", [1, 7, 150, 1001])
def test_stratified_traces_hold_the_mix_and_the_rate_exactly(n: int) -> None:
    mix = mix_by_name("mixed-iii")
    counts = mix_counts(mix, n)
    assert counts.sum() == n
    assert np.all(np.abs(counts - np.array(mix.fractions) * n) < 1)
    for seed in range(5):
        trace = generate_trace(mix, 4.0, n, seed, stratified=True)
        assert np.array_equal(np.bincount(trace.kind, minlength=len(counts)), counts)
        assert trace.arrival_s[-1] == pytest.approx(n / 4.0)
        assert np.all(np.diff(trace.arrival_s) >= 0) and trace.arrival_s[0] > 0
    # Still a random order and random gaps: two seeds differ, one seed repeats.
    a, b = (generate_trace(mix, 4.0, 150, seed, stratified=True) for seed in (0, 1))
    assert not np.array_equal(a.kind, b.kind) and not np.allclose(a.arrival_s, b.arrival_s)
    again = generate_trace(mix, 4.0, 150, 0, stratified=True)
    assert np.array_equal(a.kind, again.kind) and np.array_equal(a.arrival_s, again.arrival_s)


def test_free_traces_scatter_in_load_where_stratified_ones_do_not() -> None:
    mix = mix_by_name("mixed-iii")
    videos = {
        stratified: {
            int(np.sum(generate_trace(mix, 4.0, 150, seed, stratified=stratified).modality == 2))
            for seed in range(20)
        }
        for stratified in (False, True)
    }
    assert len(videos[False]) > 3 and videos[True] == {15}


@pytest.mark.parametrize("shapes", list(SHAPES))
def test_cost_disagrees_with_modality_in_the_cost_vs_modality_kinds(shapes: str) -> None:
    # A document outweighs a median long text several times over and weighs about what a video does;
    # a thumbnail is lighter than any image and a clip than any video.
    rng = np.random.default_rng(2)
    tokens = {kind: sample_tokens(kind, 2_000, rng, shapes).prompt_tokens for kind in RequestKind}
    assert tokens[RequestKind.DOCUMENT].min() >= 3000 > np.median(tokens[RequestKind.LONG_TEXT])
    assert np.median(tokens[RequestKind.DOCUMENT]) > 2.5 * np.median(tokens[RequestKind.LONG_TEXT])
    assert 0.5 < np.median(tokens[RequestKind.DOCUMENT]) / np.median(tokens[RequestKind.VIDEO]) < 2
    assert tokens[RequestKind.THUMBNAIL].max() < tokens[RequestKind.IMAGE].min()
    assert tokens[RequestKind.CLIP].max() < tokens[RequestKind.VIDEO].min()
    assert RequestKind.DOCUMENT.modality.value == "text" and RequestKind.CLIP.modality.value == "video"
