"""The rule for a request without a cost model: the modality's class, and what is known of its cost."""

from __future__ import annotations

import math

from rps_serve.cost import features as cols
from rps_serve.cost.model import ModalityClasses
from rps_serve.requests import Modality, RequestClass, RequestFeatures

REQUESTS = [
    RequestFeatures(Modality.VIDEO, 6300, 6272),
    RequestFeatures(Modality.TEXT, 4000),
    RequestFeatures(Modality.IMAGE, 90, 64),
]


def test_each_modality_is_its_class() -> None:
    model = ModalityClasses()
    levels = model.levels(cols.feature_matrix(REQUESTS)).tolist()
    assert [RequestClass.for_level(level, model.num_classes) for level in levels] == [
        RequestClass.ROCKS,
        RequestClass.SAND,
        RequestClass.PEBBLES,
    ]


def test_the_prefill_is_unknown_and_the_kv_tokens_are_the_prompts() -> None:
    verdicts = ModalityClasses().assess(REQUESTS)
    assert all(math.isnan(v.estimate.prefill_s) for v in verdicts)
    assert [v.estimate.memory_tokens for v in verdicts] == [6300, 4000, 90]
