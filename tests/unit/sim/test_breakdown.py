"""TTFT breakdown: the parts follow the step timeline and add up to the TTFT; stage means per modality."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.sim.breakdown import stage_means, ttft_parts
from rps_harness.sim.engine import StepRecord
from rps_serve.requests import Modality


def _step(start: float, duration: float) -> StepRecord:
    return StepRecord(start, duration, 1, 1, 0, 1, 1, 0)


def test_parts_follow_the_step_timeline() -> None:
    # Steps [0, 1), [1, 3), [3, 4); idle; [6, 6.5).
    steps = [_step(0.0, 1.0), _step(1.0, 2.0), _step(3.0, 1.0), _step(6.0, 0.5)]
    arrival = np.array([0.2, 5.0])
    ready = np.array([0.5, 5.5])  # the second is ready while the engine idles
    first = np.array([4.0, 6.5])
    parts = ttft_parts(arrival, ready, first, steps)
    assert parts.preprocess_s == pytest.approx([0.3, 0.5])
    assert parts.in_progress_s == pytest.approx([0.5, 0.0])
    assert parts.queued_s == pytest.approx([2.0, 0.5])
    assert parts.final_step_s == pytest.approx([1.0, 0.5])
    total = parts.preprocess_s + parts.in_progress_s + parts.queued_s + parts.final_step_s
    assert total == pytest.approx(first - arrival)


def test_stage_means_split_each_modalitys_ttft_at_the_engine() -> None:
    arrival = np.array([0.0, 1.0, 2.0, 3.0])
    ready = np.array([0.1, 1.3, 2.2, 3.5])
    first = np.array([0.5, 2.0, np.nan, 4.5])  # the third never got a first token
    modality = np.array(
        [Modality.TEXT.index, Modality.TEXT.index, Modality.IMAGE.index, Modality.VIDEO.index]
    )
    stages = stage_means(arrival, ready, first, modality)
    assert stages["text"] == pytest.approx({"front_end_s": 0.2, "engine_s": 0.55})
    assert stages["image"] == {"front_end_s": None, "engine_s": None}
    assert stages["all"] == pytest.approx({"front_end_s": 0.3, "engine_s": 0.7})
