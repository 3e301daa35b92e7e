"""Who may claim a class: `vllm_model` checks the class a request carries against its own estimate
(`verify`), or takes it as given (`trust`), with the repository's real ONNX cost model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rps_serve.cost import features as cols
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.triton.classes import ClassInfo, ClassSource, decide_class, estimated_class, supplied_class

VIDEO = RequestFeatures(Modality.VIDEO, 6300, 6272)


@pytest.fixture(scope="module")
def cost_model(trained_repository: Path) -> OnnxCostModel:
    return OnnxCostModel.from_repository(trained_repository)


def _claim(level: int, num_classes: int = 3) -> ClassInfo:
    tensors = {
        "rps_class_level": np.array([level]),
        "rps_class_distances": np.zeros((1, num_classes), dtype=np.float32),
        "rps_cost": np.full((1, cols.NUM_COST_COLUMNS), 0.001, dtype=np.float32),
    }
    info = supplied_class(tensors.get)
    assert info is not None
    return info


def test_verify_overrules_a_lighter_claim_and_keeps_a_heavier_one(cost_model: OnnxCostModel) -> None:
    own = estimated_class(cost_model, VIDEO)
    assert own.level > 0  # the premise: a long video is not the lightest class
    lighter = decide_class(cost_model, ClassSource.VERIFY, _claim(0), VIDEO)
    assert lighter.level == own.level and lighter.supplied  # the engine gets the server's class
    heavier = decide_class(cost_model, ClassSource.VERIFY, _claim(cost_model.num_classes - 1), VIDEO)
    assert heavier.level == cost_model.num_classes - 1
    assert decide_class(cost_model, ClassSource.VERIFY, None, VIDEO) == own
    # A claim with another number of classes cannot be compared: the server's own class stands.
    assert decide_class(cost_model, ClassSource.VERIFY, _claim(0, num_classes=2), VIDEO).level == own.level


def test_trust_takes_the_claim_as_given(cost_model: OnnxCostModel) -> None:
    claim = _claim(0)
    assert decide_class(cost_model, ClassSource.TRUST, claim, VIDEO) == claim


def test_the_engines_class_edges_hold_for_every_claim(trained_repository: Path) -> None:
    """A claim meets the served engine's class edges (`scheduling.class_edges`), as the server's own
    class does: sand longer than the room for sand is pebbles, even where the claim is trusted."""
    edged = engine_classes(OnnxCostModel.from_repository(trained_repository), 2048)
    long_text = RequestFeatures(Modality.TEXT, 1800, 0)
    for source in ClassSource:
        assert decide_class(edged, source, _claim(0), long_text).level == 1
    short_text = RequestFeatures(Modality.TEXT, 100, 0)
    assert decide_class(edged, ClassSource.TRUST, _claim(0), short_text).level == 0
