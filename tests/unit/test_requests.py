from __future__ import annotations

import pytest

from rps_serve.requests import Modality, RequestClass, RequestFeatures, request_features


def test_modality_index_round_trips() -> None:
    assert [Modality.from_index(m.index) for m in Modality] == list(Modality)


def test_request_class_labels_round_trip() -> None:
    assert [RequestClass.from_label(c.label) for c in RequestClass] == list(RequestClass)
    with pytest.raises(ValueError, match="expected one of sand, pebbles, rocks"):
        RequestClass.from_label("boulders")


@pytest.mark.parametrize("num_levels", [2, 3, 4, 5])
def test_level_names_run_from_sand_to_rocks(num_levels: int) -> None:
    names = [RequestClass.for_level(level, num_levels) for level in range(num_levels)]
    assert names[0] is RequestClass.SAND and names[-1] is RequestClass.ROCKS
    assert names == sorted(names)


def test_features_reject_inconsistent_token_counts() -> None:
    with pytest.raises(ValueError, match="exceeds prompt_tokens"):
        RequestFeatures(Modality.IMAGE, prompt_tokens=10, modality_tokens=11)
    with pytest.raises(ValueError, match="non-negative"):
        RequestFeatures(Modality.TEXT, prompt_tokens=-1)


def test_a_requests_modality_is_its_heaviest_medium() -> None:
    assert Modality.heaviest(0, 0) is Modality.TEXT
    assert Modality.heaviest(3, 0) is Modality.IMAGE
    assert Modality.heaviest(2, 1) is Modality.VIDEO


def test_request_features_take_the_heaviest_medium_and_at_most_the_prompt_as_placeholders() -> None:
    assert request_features(2, 1, 900, 800) == RequestFeatures(Modality.VIDEO, 900, 800)
    assert request_features(1, 0, 100, 150) == RequestFeatures(Modality.IMAGE, 100, 100)
    assert request_features(0, 0, 20, 0) == RequestFeatures(Modality.TEXT, 20, 0)
