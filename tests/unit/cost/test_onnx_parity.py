"""onnxruntime must compute what scikit-learn computes, on 10,000 random requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import MemoryFeature
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.cost.training import TrainingOptions, fit_cost_model, train_cost_model
from rps_serve.profiles.records import ProfileRecord
from rps_serve.requests import Modality, RequestFeatures

REQUESTS = 10_000


def _random_features(rng: np.random.Generator) -> np.ndarray:
    modality = rng.integers(0, 3, REQUESTS)
    prompt = np.exp(rng.uniform(np.log(4), np.log(80_000), REQUESTS)).astype(np.int64)
    visual = np.where(modality == Modality.TEXT.index, 0, np.floor(prompt * rng.uniform(0.8, 1.0, REQUESTS)))
    return np.column_stack([modality, prompt, visual]).astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        TrainingOptions(),
        TrainingOptions(power_transform=True, memory_feature=MemoryFeature.MODALITY_TOKENS),
        TrainingOptions(num_classes=5),
    ],
    ids=["spec", "artifact", "k5"],
)
def test_onnx_matches_sklearn(
    tmp_path: Path, reference_records: list[ProfileRecord], options: TrainingOptions
) -> None:
    model = fit_cost_model(reference_records, options)
    train_cost_model(reference_records, tmp_path, options, source="test")
    onnx_model = OnnxCostModel.from_repository(tmp_path)
    features = _random_features(np.random.default_rng(7))

    cost_sk = model.estimator.predict_cost(features.astype(np.float64))
    cost_ort = onnx_model.cost(features)
    latency_error = np.abs(cost_ort[:, cols.PREFILL_S] - cost_sk[:, cols.PREFILL_S])
    assert latency_error.max() <= 1e-4
    np.testing.assert_array_equal(cost_ort[:, cols.MEMORY_TOKENS], cost_sk[:, cols.MEMORY_TOKENS])

    # End to end, scikit-learn in float64 against onnxruntime in float32: only a request lying within
    # rounding distance of a cluster boundary can differ.
    levels_sk = model.classifier.predict(cost_sk)
    levels_ort = onnx_model.classify(cost_ort)
    assert np.mean(levels_sk == levels_ort) >= 0.999
    assert onnx_model.num_classes == options.num_classes


def test_assess_returns_estimate_and_level(trained_repository: Path) -> None:
    model = OnnxCostModel.from_repository(trained_repository)
    short, video = model.assess(
        [RequestFeatures(Modality.TEXT, 50), RequestFeatures(Modality.VIDEO, 6300, 6272)]
    )
    assert short.estimate.memory_tokens == 50 and video.estimate.memory_tokens == 6300
    assert short.estimate.prefill_s < video.estimate.prefill_s
    assert short.level < video.level


def test_missing_repository_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="rps-serve train"):
        OnnxCostModel.from_repository(tmp_path)
