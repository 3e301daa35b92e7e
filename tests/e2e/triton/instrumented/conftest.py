"""One real server for the tests that watch the repository's own models from inside: `preprocess` and
`vllm_model` each run behind `instrumentation.INSTRUMENTED_MODEL`, which counts the prompts each
tokenizes (`Counts`) and turns a response carrying an output its request did not ask for into an error
naming the request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.triton.conftest import Server, start_server
from tests.e2e.triton.instrumentation import PREPROCESS, Counts, instrumented_models

__all__ = ["PREPROCESS", "Counts"]


@pytest.fixture(scope="package")
def counts(tmp_path_factory: pytest.TempPathFactory) -> Counts:
    return Counts(tmp_path_factory.mktemp("counts"))


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory, counts: Counts) -> Iterator[Server]:
    models = instrumented_models(counts.directory, tmp_path_factory.mktemp("ends"))
    with start_server(tmp_path_factory, model_files=models) as running:
        yield running
