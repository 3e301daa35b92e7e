"""Column layout of the arrays the cost models exchange (also the ONNX tensor layouts)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rps_serve.requests import Modality, RequestFeatures

# Estimator input "features": [modality index, prompt tokens, modality tokens].
MODALITY, PROMPT_TOKENS, MODALITY_TOKENS = 0, 1, 2
NUM_FEATURES = 3

# Estimator output / classifier input "cost": [prefill seconds, memory tokens, modality tokens].
PREFILL_S, MEMORY_TOKENS, COST_MODALITY_TOKENS = 0, 1, 2
NUM_COST_COLUMNS = 3


def feature_matrix(requests: Sequence[RequestFeatures]) -> np.ndarray:
    """The float32 [n, 3] estimator input for `requests`."""
    matrix = np.empty((len(requests), NUM_FEATURES), dtype=np.float32)
    for row, request in enumerate(requests):
        matrix[row] = (request.modality.index, request.prompt_tokens, request.modality_tokens)
    return matrix


def requests_of(matrix: np.ndarray) -> list[RequestFeatures]:
    """The requests whose [n, 3] estimator input `matrix` is (`feature_matrix`'s inverse); whole
    numbers and a known modality index assumed (`RequestFeatures` checks the token counts)."""
    return [
        RequestFeatures(Modality.from_index(modality), prompt_tokens, modality_tokens)
        for modality, prompt_tokens, modality_tokens in matrix.astype(int).tolist()
    ]
