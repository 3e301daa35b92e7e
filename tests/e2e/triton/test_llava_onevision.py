"""The GPU image's model family on the CPU stack: a tiny random LLaVA-OneVision served by the whole
repository, its anyres image tiles and pooled video frames counted by `preprocess` as vLLM counts them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from rps_harness.client import Generation, encode_image, encode_video
from rps_harness.local.tiny_model import Family, TinyModelSpec
from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_harness.workload.request_format import RequestFormat
from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestClass
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Server, run, start_server
from tests.e2e.triton.test_server import preprocess_features

# 384x384 crops of 729 tokens; videos sampled to 8 frames of 196 tokens each, plus one newline.
LLAVA = TinyModelSpec(
    Family.LLAVA_ONEVISION, layers=2, hidden=128, image_size=384, video_size=384, video_frames=8
)
# (modality, image (height, width) or video (frames, height, width)): one crop, a grid of crops of a
# wide image, a tall one; a video with twice the frames the model takes (preprocess samples them).
CASES = {
    "text": (Modality.TEXT, None),
    "image 384x384": (Modality.IMAGE, (384, 384)),
    "image 480x640": (Modality.IMAGE, (480, 640)),
    "image 900x300": (Modality.IMAGE, (900, 300)),
    "video 16x384x384": (Modality.VIDEO, (16, 384, 384)),
    "video 16x240x320": (Modality.VIDEO, (16, 240, 320)),
}


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with start_server(tmp_path_factory, spec=LLAVA) as running:
        yield running


def request(
    served: RequestFormat, modality: Modality, shape: tuple[int, ...] | None, seed: int
) -> Generation:
    prompt = served.prompt(filler_text(30, random.Random(seed)), modality)
    pixels = np.random.default_rng(seed)
    images: tuple[bytes, ...] = ()
    video = None
    if modality is Modality.IMAGE and shape is not None:
        images = (encode_image(random_image(shape[0], shape[1], pixels)),)
    elif modality is Modality.VIDEO and shape is not None:
        video = encode_video(random_video(shape[0], shape[1], shape[2], pixels))
    return Generation(prompt, images, video, sampling_parameters={"max_tokens": 4, "ignore_eos": True})


@pytest.mark.parametrize("case", list(CASES))
def test_preprocess_counts_the_tokens_vllm_allocates(llava: Server, case: str) -> None:
    modality, shape = CASES[case]
    served = RequestFormat.of_model(llava.model)
    generation = replace(
        request(served, modality, shape, seed=len(case)),
        stream=False,
        additional_outputs=("num_input_tokens",),
    )

    features = preprocess_features(llava, generation)
    result = run(llava, VLLM_MODEL, generation)

    assert result.error is None
    assert features[0, cols.MODALITY] == modality.index
    assert (features[0, cols.MODALITY_TOKENS] > 0) == (modality is not Modality.TEXT)
    assert result.outputs["num_input_tokens"][0] == features[0, cols.PROMPT_TOKENS]


def test_the_ensemble_streams_and_classifies_every_modality(llava: Server) -> None:
    served = RequestFormat.of_model(llava.model)
    labels = {c.label for c in RequestClass}
    for seed, modality in enumerate(Modality):
        shape = {Modality.TEXT: None, Modality.IMAGE: (384, 384), Modality.VIDEO: (8, 384, 384)}[modality]
        result = run(llava, ENSEMBLE, request(served, modality, shape, seed))
        assert result.error is None, modality
        assert 1 <= len(result.chunks) <= 4
        assert result.outputs["rps_class"][0].decode() in labels
