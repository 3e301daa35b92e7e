"""One real server for the reliability tests, with limits lower than model.json's, so that requests over
them stay small. Its `preprocess` and `vllm_model` are the repository's own behind
`instrumentation.INSTRUMENTED_MODEL`, which records how every request ended (`Ends`): the error code
and a cancelled request's end, which Triton 2.51's gRPC stream does not carry to the client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.triton.conftest import Server, start_server
from tests.e2e.triton.instrumentation import Ends, instrumented_models

# Lower than model.json's, so that requests over them stay small; test media (224x224 images, 16-frame
# 224x224 videos, ~2K-token long texts) fit.
LIMITS = {
    "max_text_bytes": 65536,
    "max_prompt_tokens": 4000,
    "max_output_tokens": 256,
    "max_images": 1,
    "max_image_bytes": 200_000,
    "max_image_pixels": 256 * 256,
    "max_video_bytes": 1_000_000,
    "max_video_pixels": 240 * 240,
    "max_video_frames": 32,
}


@pytest.fixture(scope="package")
def ends(tmp_path_factory: pytest.TempPathFactory) -> Ends:
    return Ends(tmp_path_factory.mktemp("ends"))


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory, ends: Ends) -> Iterator[Server]:
    models = instrumented_models(tmp_path_factory.mktemp("counts"), ends.directory)
    with start_server(tmp_path_factory, media=LIMITS, model_files=models) as running:
        yield running
