"""The online refit: it converges from a wrong fit, moves boundedly, and one outlier moves no boundary."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rps_harness.workload.synthetic_profile import with_slower_images
from rps_serve.cost.model import agreement
from rps_serve.cost.online import OnlineCostModel, OnlineOptions
from rps_serve.cost.training import TrainingOptions, fit_cost_model
from rps_serve.profiles.records import ProfileRecord
from rps_serve.requests import Modality

SLOW_IMAGES = 20.0  # the served device: its vision encoder 20 times slower than the reference's


@pytest.mark.slow
def test_a_wrong_fit_converges_to_the_served_devices_classes(
    trained_repository: Path, reference_records: list[ProfileRecord]
) -> None:
    truth_records = with_slower_images(reference_records, SLOW_IMAGES)
    truth = fit_cost_model(truth_records, TrainingOptions())
    online = OnlineCostModel.from_repository(trained_repository, OnlineOptions())
    probes = [r.features for r in random.Random(1).sample(truth_records, 300)]
    start = agreement(online, truth, probes)
    assert start < 0.9  # the starting fit classes the probes wrongly, or the test shows nothing

    served = truth_records.copy()
    random.Random(2).shuffle(served)
    agreed = []
    for batch in range(0, 1200, 40):
        online.observe(replace(r, under_load=True) for r in served[batch : batch + 40])
        assert online.update() is not None
        agreed.append(agreement(online, truth, probes))
    assert max(agreed[-5:]) >= 0.9 and min(agreed[-5:]) >= 0.85, (start, agreed)


def test_one_update_moves_a_line_at_most_by_its_bound(
    trained_repository: Path, reference_records: list[ProfileRecord]
) -> None:
    options = OnlineOptions(max_step=1.5)
    online = OnlineCostModel.from_repository(trained_repository, options)
    before = online.lines
    online.observe(with_slower_images(reference_records, SLOW_IMAGES)[:: len(reference_records) // 100])
    update = online.update()
    assert update is not None and update.lines_before == before
    images = [r.prompt_tokens for r in reference_records if r.modality is Modality.IMAGE]
    for tokens in np.percentile(images, [10, 50, 90]):
        ratio = update.lines_after[Modality.IMAGE].seconds(tokens) / before[Modality.IMAGE].seconds(tokens)
        assert 1.0 < ratio <= options.max_step + 1e-9


@pytest.mark.slow
def test_one_outlier_cannot_move_a_class_boundary(
    trained_repository: Path, reference_records: list[ProfileRecord]
) -> None:
    online = OnlineCostModel.from_repository(trained_repository, OnlineOptions(min_new_records=1))
    served = reference_records.copy()
    random.Random(3).shuffle(served)
    for batch in range(0, 600, 50):  # the repository's own device: the fit settles where it is
        online.observe(served[batch : batch + 50])
        online.update()
    probes = [r.features for r in served[600:900]]
    before = [v.level for v in online.assess(probes)]
    video = next(r for r in served[900:] if r.modality is Modality.VIDEO)
    online.observe([replace(video, prefill_s=video.admission_s * 1000, encoder_s=0.0)])
    update = online.update()
    assert update is not None and not update.boundaries_moved
    assert [v.level for v in online.assess(probes)] == before


@pytest.mark.slow
def test_a_served_mix_of_one_modality_leaves_the_classes_where_they_were(
    trained_repository: Path, reference_records: list[ProfileRecord]
) -> None:
    """The boundaries are drawn over the population the fit was trained on, not over the requests
    served: texts alone, at the repository's own costs, re-class nothing (k-means over them alone
    would split the texts into every class)."""
    online = OnlineCostModel.from_repository(trained_repository, OnlineOptions(min_new_records=1))
    probes = [r.features for r in reference_records[::7]]
    before = [v.level for v in online.assess(probes)]
    texts = [r for r in reference_records if r.modality is Modality.TEXT]
    assert len(texts) >= 100
    for batch in range(0, len(texts), 50):
        online.observe(texts[batch : batch + 50])
        update = online.update()
        assert update is not None and not update.boundaries_moved
    assert [v.level for v in online.assess(probes)] == before


def test_the_setting_is_a_switch_or_its_fields() -> None:
    assert OnlineOptions.from_setting(True).enabled and not OnlineOptions.from_setting(False).enabled
    assert not OnlineOptions.from_setting(None).enabled  # absent: the repository's fit, as shipped
    tuned = OnlineOptions.from_setting({"interval_s": 2, "hysteresis": 0.1})
    assert tuned.enabled and tuned.interval_s == 2
    for bad in ({"interval": 2}, {"max_step": 1.0}, "yes"):
        with pytest.raises(ValueError, match="cost_model_online"):
            OnlineOptions.from_setting(bad)


def test_prompt_lengths_too_alike_to_fix_a_slope_scale_the_line(
    trained_repository: Path, reference_records: list[ProfileRecord]
) -> None:
    """A server that sends one image size: the observed images' prompt lengths differ only by their
    text, and the update scales the image line (its level follows them) without tilting it."""
    online = OnlineCostModel.from_repository(trained_repository, OnlineOptions())
    before = online.lines[Modality.IMAGE]
    rng = random.Random(4)
    one_size = []
    for _ in range(100):
        tokens = 1500 + rng.randrange(100)
        seconds = 1.5 * before.seconds(1550) * rng.uniform(0.7, 1.3)  # within one step of the line
        one_size.append(ProfileRecord(Modality.IMAGE, tokens, 1480, 0.0, seconds, 8))
    online.observe(one_size)
    update = online.update()
    assert update is not None
    after = update.lines_after[Modality.IMAGE]
    assert after.slope > 0 and after.slope / before.slope == pytest.approx(after.intercept / before.intercept)
    assert after.seconds(1550) > before.seconds(1550)  # toward what was observed
