"""A request through `rps_ensemble` is counted and classed once: `preprocess` tokenizes its prompt, and
`vllm_model` checks the features the ensemble carries (`rps_features`) against the request's media
instead of tokenizing it again; a request sent to `vllm_model` directly is counted there.

The server runs the repository's own `preprocess` and `vllm_model`, each behind a counter
(`COUNTING_MODEL`) that leaves a file for every prompt it tokenizes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.triton import protocol as p
from rps_serve.triton.preprocess import Preprocessor
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.settings import SETTINGS_FILE, read_settings
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Requests, Server, run, start_server

PREPROCESS = "preprocess"

COUNTING_MODEL = '''
import locale
import uuid
from pathlib import Path

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

from {module} import TritonPythonModel as Served

COUNTS = Path({counts!r})


class TritonPythonModel(Served):
    """The real {name}; every prompt it tokenizes leaves a `{name}-*` file in COUNTS."""

    def initialize(self, args):
        super().initialize(args)
        counter = self.preprocessor.counter
        count = counter.count

        def counted(*args, **kwargs):
            (COUNTS / f"{name}-{{uuid.uuid4().hex}}").touch()
            return count(*args, **kwargs)

        counter.count = counted
'''


class Counts:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def of(self, model: str) -> int:
        return len(list(self.directory.glob(f"{model}-*")))


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> Counts:
    return Counts(tmp_path_factory.mktemp("counts"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, counts: Counts) -> Iterator[Server]:
    models = {
        name: COUNTING_MODEL.format(module=module, counts=str(counts.directory), name=name)
        for name, module in (
            (PREPROCESS, "rps_serve.triton.preprocess_model"),
            (VLLM_MODEL, "rps_serve.triton.vllm_model"),
        )
    }
    with start_server(tmp_path_factory, model_files=models) as running:
        yield running


def test_a_request_through_the_ensemble_is_tokenized_once_and_one_sent_directly_once(
    server: Server, requests: Requests, counts: Counts
) -> None:
    before = {model: counts.of(model) for model in (PREPROCESS, VLLM_MODEL)}
    for modality in Modality:
        result = run(server, ENSEMBLE, requests.make(modality, max_tokens=2))
        assert result.error is None and result.outputs[p.RPS_CLASS], modality
    assert counts.of(PREPROCESS) - before[PREPROCESS] == len(Modality)
    assert counts.of(VLLM_MODEL) == before[VLLM_MODEL]  # checked, not counted again
    assert run(server, VLLM_MODEL, requests.make(Modality.TEXT, max_tokens=2)).error is None
    assert counts.of(VLLM_MODEL) == before[VLLM_MODEL] + 1
    assert counts.of(PREPROCESS) - before[PREPROCESS] == len(Modality)


def _with_features(tensors: dict[str, np.ndarray], features: RequestFeatures) -> dict[str, np.ndarray]:
    return {**tensors, p.CLAIMED_FEATURES: cols.feature_matrix([features])}


def test_features_that_disagree_with_the_media_are_refused_and_the_server_serves_on(
    server: Server, requests: Requests
) -> None:
    video = requests.make(Modality.VIDEO, max_tokens=2)
    served = read_settings(server.repository / SETTINGS_FILE, server.repository)
    preprocessor = Preprocessor(PromptTokenCounter(server.model), served.media)
    true = preprocessor.inspect(p.parse_request(video.tensors().get))  # as `preprocess` counts it
    text_tokens = true.prompt_tokens - true.modality_tokens
    lies = {
        "a video claimed as text": RequestFeatures(Modality.TEXT, text_tokens),
        "fewer placeholder tokens": RequestFeatures(Modality.VIDEO, text_tokens + 10, 10),
        "more text than the prompt's bytes": RequestFeatures(
            Modality.VIDEO, true.modality_tokens + 10 * len(video.prompt.encode()), true.modality_tokens
        ),
    }
    for name, lie in lies.items():
        result = run(server, VLLM_MODEL, _with_features(video.tensors(), lie))
        assert result.error is not None and p.CLAIMED_FEATURES in result.error, name
    result = run(server, VLLM_MODEL, _with_features(video.tensors(), true))
    assert result.error is None and result.outputs[p.RPS_CLASS]
