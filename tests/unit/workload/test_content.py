"""The content policy both replays share: token bounds, media sizes, fresh content per seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rps_harness.engine_ab.async_llm_replay import build_requests as engine_requests
from rps_harness.loadtest.replay import build_requests as triton_requests
from rps_harness.workload.content import ContentLimits, plan_content
from rps_harness.workload.mixes import mix_by_name
from rps_harness.workload.prompts import one_token_words
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace, generate_trace
from rps_serve.cost.model import ModalityClasses
from rps_serve.requests import Modality
from rps_serve.triton.prompt_tokens import PromptTokenCounter


@pytest.fixture(scope="module")
def trace() -> Trace:
    return generate_trace(mix_by_name("mixed-iii"), 4.0, 60, seed=3)


def test_text_and_output_tokens_keep_the_trace_within_the_limits(
    trace: Trace, qwen_format: RequestFormat
) -> None:
    limits = ContentLimits(max_text_tokens=500, min_output_tokens=4, max_output_tokens=32)
    plan = plan_content(trace, qwen_format, limits)
    text = trace.prompt_tokens - trace.modality_tokens
    assert np.array_equal(plan.text_tokens, np.clip(text, 1, 500))
    assert np.array_equal(plan.output_tokens, np.clip(trace.output_tokens, 4, 32))
    assert (plan.text_tokens == 500).any() and (plan.text_tokens < 500).any()  # the cap bites, not always
    unbounded = plan_content(trace, qwen_format, ContentLimits(max_text_tokens=10**6))
    assert np.array_equal(unbounded.output_tokens, trace.output_tokens)


def test_media_placeholders_are_the_models_not_the_traces(trace: Trace, qwen_format: RequestFormat) -> None:
    plan = plan_content(trace, qwen_format, ContentLimits(max_text_tokens=4096))
    for modality in Modality:
        tokens = qwen_format.placeholder_tokens(modality)
        assert (plan.visual_tokens[trace.modality == modality.index] == tokens).all()
    mixed = generate_trace(mix_by_name("cost-vs-modality"), 4.0, 200, seed=3)
    by_kind = plan_content(mixed, qwen_format, ContentLimits(max_text_tokens=8000))
    for index, kind in enumerate(RequestKind):
        assert (by_kind.visual_tokens[mixed.kind == index] == qwen_format.placeholder_tokens(kind)).all()
    served = plan.served_trace(trace)
    assert np.array_equal(served.modality_tokens, plan.visual_tokens)
    assert np.array_equal(served.prompt_tokens, plan.text_tokens + plan.turn_tokens + plan.visual_tokens)
    assert np.array_equal(served.arrival_s, trace.arrival_s)


def test_contents_are_fresh_per_seed_and_reproducible(trace: Trace, qwen_format: RequestFormat) -> None:
    plan = plan_content(trace, qwen_format, ContentLimits(max_text_tokens=256))
    first = list(plan.contents(qwen_format, seed=1))
    again = list(plan.contents(qwen_format, seed=1))
    other = list(plan.contents(qwen_format, seed=2))
    assert [c.prompt for c in first] == [c.prompt for c in again]
    assert all(a.prompt != b.prompt for a, b in zip(first, other, strict=True))
    assert len({c.prompt for c in first}) == len(first)
    for row, content in enumerate(first):
        assert content.modality.index == trace.modality[row]
        assert content.max_tokens == plan.output_tokens[row]
        assert (content.image is not None) == (content.modality is Modality.IMAGE)
        assert (content.video is not None) == (content.modality is Modality.VIDEO)
    image = next(c.image for c in first if c.image is not None)
    video = next(c.video for c in first if c.video is not None)
    media = qwen_format.media
    assert image.shape == (media.image_size, media.image_size, 3)
    assert video.shape == (media.video_frames, media.video_size, media.video_size, 3)


# From one token to a whole document, across the seeds' draws of words.
PLANNED_TEXT_TOKENS = (1, 2, 3, 8, 40, 200, 1023, 1300, 3600, 4500)


@pytest.mark.parametrize("family", ["tiny_qwen", "tiny_llava"])
def test_texts_are_the_trace_s_tokens_and_prompts_the_served_trace_s(
    family: str, request: pytest.FixtureRequest
) -> None:
    """On the served model's tokenizer a text is exactly its trace's text tokens (tolerance 0), and the
    prompt, counted as `preprocess` counts it for vLLM, exactly its served trace's prompt tokens."""
    model: Path = request.getfixturevalue(family)
    served = RequestFormat.of_model(model)
    counter = PromptTokenCounter(model)
    kinds = [RequestKind.SHORT_TEXT, RequestKind.IMAGE, RequestKind.THUMBNAIL, RequestKind.CLIP]
    rows = [(kind, tokens) for kind in kinds for tokens in PLANNED_TEXT_TOKENS]
    visual = np.array([served.placeholder_tokens(kind) for kind, _ in rows])
    trace = Trace(
        arrival_s=np.arange(len(rows), dtype=np.float64),
        kind=np.array([list(RequestKind).index(kind) for kind, _ in rows]),
        prompt_tokens=np.array([tokens for _, tokens in rows]) + visual,
        modality_tokens=visual,
        output_tokens=np.full(len(rows), 4),
    )
    plan = plan_content(trace, served, ContentLimits(max_text_tokens=4500))
    served_trace = plan.served_trace(trace)
    tokenizer = counter.processor.tokenizer
    for seed in (0, 1):
        for row, content in enumerate(plan.contents(served, seed)):
            before, after = served.turns[content.modality]
            text = content.prompt.removeprefix(before).removesuffix(after)
            assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) == rows[row][1]
            images = [] if content.image is None else [content.image.shape[:2]]
            video = None if content.video is None else content.video.shape[:3]
            counted = counter.count(content.prompt, images, video)
            assert counted.prompt_tokens == served_trace.prompt_tokens[row]
            assert counted.placeholder_tokens == served_trace.modality_tokens[row]


def test_a_tokenizer_that_keeps_few_filler_words_whole_is_refused() -> None:
    def by_character(texts: list[str], add_special_tokens: bool) -> dict[str, list[list[str]]]:
        return {"input_ids": [list(text) for text in texts]}

    with pytest.raises(ValueError, match="only 0 of the filler's candidate words"):
        one_token_words(by_character)


def test_both_replays_send_the_same_content(trace: Trace, qwen_format: RequestFormat) -> None:
    rows = trace.modality != Modality.VIDEO.index  # skip MP4 encoding: text and images are enough here
    columns = (trace.arrival_s, trace.kind, trace.prompt_tokens, trace.modality_tokens, trace.output_tokens)
    small = Trace(*(column[rows][:12] for column in columns))
    limits = ContentLimits(max_text_tokens=300, max_output_tokens=16)
    over_triton = triton_requests(small, qwen_format, limits, seed=5)
    in_engine = engine_requests(small, qwen_format, ModalityClasses(), limits, seed=5)
    assert [g.prompt for g in over_triton] == [r.prompt["prompt"] for r in in_engine]
    assert [g.sampling_parameters["max_tokens"] for g in over_triton] == [r.max_tokens for r in in_engine]
    assert [len(g.images) for g in over_triton] == [
        int("multi_modal_data" in r.prompt and "image" in r.prompt["multi_modal_data"]) for r in in_engine
    ]


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ContentLimits(max_text_tokens=0)
    with pytest.raises(ValueError, match="max_output_tokens"):
        ContentLimits(max_text_tokens=10, min_output_tokens=8, max_output_tokens=4)


def test_thumbnails_and_clips_send_their_own_media(qwen_format: RequestFormat) -> None:
    mixed = generate_trace(mix_by_name("cost-vs-modality"), 4.0, 80, seed=4)
    rows = [
        i
        for i, k in enumerate(mixed.kind)
        if list(RequestKind)[k] in (RequestKind.THUMBNAIL, RequestKind.CLIP)
    ]
    plan = plan_content(mixed, qwen_format, ContentLimits(max_text_tokens=64))
    contents = list(plan.contents(qwen_format, seed=1))
    media = qwen_format.media
    for row in rows:
        content = contents[row]
        if list(RequestKind)[mixed.kind[row]] is RequestKind.THUMBNAIL:
            assert content.image is not None and content.image.shape[:2] == (media.thumbnail_size,) * 2
        else:
            assert content.video is not None and content.video.shape[0] == media.clip_frames
    assert rows
