from __future__ import annotations

import numpy as np
import pytest

from rps_serve.cost.estimator import ImpactEstimator
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import reference_model
from rps_serve.requests import Modality, RequestFeatures
from tests.conftest import REFERENCE_MODEL


def test_fit_recovers_the_published_lines(reference_records: list[ProfileRecord]) -> None:
    """The synthetic profile is built around the published fits; fitting must find them again."""
    estimator = ImpactEstimator().fit(reference_records)
    published = reference_model(REFERENCE_MODEL).lines
    for modality in Modality:
        tokens = np.array([r.prompt_tokens for r in reference_records if r.modality is modality], float)
        fitted = estimator.lines_[modality].seconds(tokens)
        expected = published[modality].seconds(tokens)
        assert np.median(np.abs(fitted / expected - 1)) < 0.05, modality


def test_visual_lines_sit_at_the_90th_percentile(reference_records: list[ProfileRecord]) -> None:
    estimator = ImpactEstimator(quantile=0.9).fit(reference_records)
    for modality in (Modality.IMAGE, Modality.VIDEO):
        rows = [r for r in reference_records if r.modality is modality]
        covered = np.mean([r.prefill_s <= estimator.estimate(r.features).prefill_s + 1e-9 for r in rows])
        assert 0.85 <= covered <= 0.95, (modality, covered)


def test_memory_is_prefill_tokens_and_mae_is_reported(reference_records: list[ProfileRecord]) -> None:
    estimator = ImpactEstimator().fit(reference_records)
    request = RequestFeatures(Modality.VIDEO, prompt_tokens=5000, modality_tokens=4900)
    assert estimator.estimate(request).memory_tokens == 5000
    assert set(estimator.mae_s_) == set(Modality)
    assert all(mae > 0 for mae in estimator.mae_s_.values())


def test_estimates_grow_with_tokens(reference_records: list[ProfileRecord]) -> None:
    estimator = ImpactEstimator().fit(reference_records)
    for modality in Modality:
        small = estimator.estimate(RequestFeatures(modality, 1000, 0)).prefill_s
        large = estimator.estimate(RequestFeatures(modality, 10000, 0)).prefill_s
        assert large > small


def test_missing_modality_is_a_clear_error(reference_records: list[ProfileRecord]) -> None:
    text_only = [r for r in reference_records if r.modality is Modality.TEXT]
    with pytest.raises(ValueError, match="0 image records"):
        ImpactEstimator().fit(text_only)


def test_sklearn_pipeline_equals_the_lines(reference_records: list[ProfileRecord]) -> None:
    estimator = ImpactEstimator().fit(reference_records)
    rng = np.random.default_rng(0)
    features = np.column_stack(
        [rng.integers(0, 3, 500), prompt := rng.integers(1, 60_000, 500), np.floor(prompt * rng.random(500))]
    ).astype(np.float64)
    np.testing.assert_allclose(
        estimator.to_sklearn().predict(features), estimator.predict_cost(features), rtol=1e-9, atol=1e-12
    )
