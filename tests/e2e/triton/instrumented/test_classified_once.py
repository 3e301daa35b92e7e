"""A request through `rps_ensemble` is counted and classed once: `preprocess` tokenizes its prompt, and
`vllm_model` checks the features the ensemble carries (`rps_features`) against the request's media
instead of tokenizing it again; a request sent to `vllm_model` directly is counted there.

The package's server runs the repository's own `preprocess` and `vllm_model`, each leaving a file for
every prompt it tokenizes (`Counts`)."""

from __future__ import annotations

import numpy as np

from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.triton import protocol as p
from rps_serve.triton.preprocess import Preprocessor
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.settings import SETTINGS_FILE, read_settings
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Requests, Server, run
from tests.e2e.triton.instrumented.conftest import PREPROCESS, Counts


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
