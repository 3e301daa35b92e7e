"""Prefill lines fitted to profile records: the one fit behind the Impact Estimator, its online
refit and the simulator's measured and reference devices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality


def fit_line(tokens: np.ndarray, seconds: np.ndarray, quantile: float | None = None) -> PrefillLine:
    """The line of admission `seconds` on prompt `tokens`: least squares, or with `quantile` the line
    that share of the points lie under (quantile regression)."""
    x = np.asarray(tokens, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if quantile is None:
        slope, intercept = np.polyfit(x, y, 1)
        return PrefillLine(float(intercept), float(slope))
    from sklearn.linear_model import QuantileRegressor

    regressor = QuantileRegressor(quantile=quantile, alpha=0.0, solver="highs").fit(x[:, None], y)
    return PrefillLine(float(regressor.intercept_), float(regressor.coef_[0]))


def modality_points(records: Sequence[ProfileRecord], modality: Modality) -> tuple[np.ndarray, np.ndarray]:
    """Prompt tokens and admission seconds of `records`' `modality`, at least two of them to fit a line."""
    rows = [r for r in records if r.modality is modality]
    if len(rows) < 2:
        raise ValueError(f"profile has {len(rows)} {modality.value} records; need at least 2 to fit a line")
    tokens = np.array([r.prompt_tokens for r in rows], dtype=np.float64)
    return tokens, np.array([r.admission_s for r in rows], dtype=np.float64)
