"""Observed prefill costs: a step's time split over its tokens, a record when a prefill completes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rps_serve.cost.observed import PrefillCostObserver, StepWork
from rps_serve.requests import Modality, RequestFeatures

VIDEO = RequestFeatures(Modality.VIDEO, prompt_tokens=3000, modality_tokens=2900)
TEXT = RequestFeatures(Modality.TEXT, prompt_tokens=100, modality_tokens=0)


def test_a_prefill_chunked_over_steps_is_charged_its_share_of_each() -> None:
    observer = PrefillCostObserver()
    # Step 1: 2,000 of the video's tokens beside 8 decoding requests; nothing completes.
    assert observer.observe(StepWork({"video": 2000}, decode_tokens=8), seconds=1.004) == []
    assert observer.open_requests == 1
    # Step 2: the video's last 1,000 tokens and a whole short text, which both complete.
    records = observer.observe(
        StepWork({"video": 1000, "text": 100}, decode_tokens=0, completed={"video": VIDEO, "text": TEXT}),
        seconds=0.55,
    )
    by_modality = {r.modality: r for r in records}
    assert by_modality[Modality.VIDEO].prefill_s == pytest.approx(2000 * 0.0005 + 1000 * 0.0005)
    assert by_modality[Modality.TEXT].prefill_s == pytest.approx(100 * 0.0005)
    video = by_modality[Modality.VIDEO]
    assert (video.prompt_tokens, video.modality_tokens) == (VIDEO.prompt_tokens, VIDEO.modality_tokens)
    assert all(r.under_load and r.encoder_s == 0 and r.admission_s == r.prefill_s for r in records)
    assert observer.open_requests == 0


def test_a_forgotten_prefill_starts_over() -> None:
    observer = PrefillCostObserver()
    observer.observe(StepWork({"video": 2000}), seconds=2.0)
    observer.forget("video")  # preempted: its computed tokens are gone
    (record,) = observer.observe(StepWork({"video": 3000}, completed={"video": VIDEO}), seconds=3.0)
    assert record.prefill_s == pytest.approx(3.0)
    observer.forget("never seen")  # aborting an unknown request is no error


def test_a_step_without_tokens_charges_nobody() -> None:
    observer = PrefillCostObserver()
    assert observer.observe(StepWork({}), seconds=0.1) == []
    assert observer.open_requests == 0


@given(
    chunks=st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 4096), min_size=1),
    decode=st.integers(0, 256),
    seconds=st.floats(0.0, 10.0),
)
def test_a_steps_time_is_shared_out_exactly(chunks: dict[str, int], decode: int, seconds: float) -> None:
    """Every request's share plus the decode tokens' is the step's time, whatever the mix."""
    observer = PrefillCostObserver()
    completed = {request_id: TEXT for request_id in chunks}
    records = observer.observe(StepWork(chunks, decode, completed), seconds)
    decode_share = seconds * decode / (sum(chunks.values()) + decode)
    assert sum(r.prefill_s for r in records) + decode_share == pytest.approx(seconds)
