from __future__ import annotations

import numpy as np
import pytest

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import MemoryFeature, RequestClassifier
from rps_serve.cost.estimator import ImpactEstimator
from rps_serve.profiles.records import ProfileRecord
from rps_serve.requests import Modality, RequestClass


def _cost(records: list[ProfileRecord]) -> np.ndarray:
    estimator = ImpactEstimator().fit(records)
    return estimator.predict_cost(cols.feature_matrix([r.features for r in records]))


@pytest.mark.parametrize("num_classes", [2, 3, 4, 5])
@pytest.mark.parametrize("power_transform", [False, True])
def test_levels_are_ordered_by_centroid_sum(
    reference_records: list[ProfileRecord], num_classes: int, power_transform: bool
) -> None:
    classifier = RequestClassifier(num_classes, power_transform=power_transform).fit(_cost(reference_records))
    sums = classifier.centroids_.sum(axis=1)
    assert list(sums) == sorted(sums)
    assert classifier.class_counts_.sum() == len(reference_records)
    assert (classifier.class_counts_ > 0).all()


def test_lightest_and_heaviest_requests_land_at_the_ends(reference_records: list[ProfileRecord]) -> None:
    cost = _cost(reference_records)
    classifier = RequestClassifier(3).fit(cost)
    lightest = cost[np.argmin(cost[:, cols.PREFILL_S] + cost[:, cols.MEMORY_TOKENS] / 1e4)]
    heaviest = cost[np.argmax(cost[:, cols.PREFILL_S])]
    assert classifier.predict(lightest[None]).tolist() == [RequestClass.SAND]
    assert classifier.predict(heaviest[None]).tolist() == [RequestClass.ROCKS]


def test_classes_mostly_follow_modality(reference_records: list[ProfileRecord]) -> None:
    """Short text should be mostly sand and long videos rocks; modalities overlap, so not all."""
    cost = _cost(reference_records)
    levels = RequestClassifier(3).fit(cost).predict(cost)
    modality = np.array([r.modality.index for r in reference_records])
    assert np.mean(levels[modality == Modality.TEXT.index] == RequestClass.SAND) > 0.5
    assert np.mean(levels[modality == Modality.VIDEO.index] == RequestClass.ROCKS) > 0.3
    assert np.mean(levels[modality == Modality.TEXT.index] == RequestClass.ROCKS) < 0.05


def test_memory_feature_variant_uses_modality_tokens(reference_records: list[ProfileRecord]) -> None:
    cost = _cost(reference_records)
    classifier = RequestClassifier(3, memory_feature=MemoryFeature.MODALITY_TOKENS).fit(cost)
    shuffled = cost.copy()
    shuffled[:, cols.MEMORY_TOKENS] = np.random.default_rng(0).permutation(shuffled[:, cols.MEMORY_TOKENS])
    assert (classifier.predict(shuffled) == classifier.predict(cost)).all()


def test_class_count_outside_range_is_rejected(reference_records: list[ProfileRecord]) -> None:
    with pytest.raises(ValueError, match=r"num_classes must be in 2\.\.5"):
        RequestClassifier(6).fit(_cost(reference_records))
