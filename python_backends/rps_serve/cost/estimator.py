"""Impact Estimator: per-modality prefill-latency lines and memory = prefill tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, PolynomialFeatures

from rps_serve.cost import features as cols
from rps_serve.profiles.lines import fit_line, modality_points
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import CostEstimate, Modality, RequestFeatures

QUANTILE_MODALITIES = frozenset({Modality.IMAGE, Modality.VIDEO})


class ImpactEstimator:
    """Fits admission seconds (vision encoding + prefill) against prompt tokens, one line per modality.

    Text uses least squares; image and video use quantile regression at `quantile` (0.9 by
    default), so heavy requests are rarely underestimated. Memory is the number of prefill
    tokens, since the KV cache grows linearly with them.
    """

    def __init__(self, quantile: float = 0.9) -> None:
        self.quantile = quantile

    @classmethod
    def of_lines(cls, lines: Mapping[Modality, PrefillLine], quantile: float = 0.9) -> ImpactEstimator:
        """An estimator whose lines are given (an online refit's), not fitted here."""
        estimator = cls(quantile)
        estimator.lines_ = dict(lines)
        estimator.mae_s_, estimator.counts_ = {}, {}
        return estimator

    def fit(self, records: Sequence[ProfileRecord]) -> ImpactEstimator:
        self.lines_: dict[Modality, PrefillLine] = {}
        self.mae_s_: dict[Modality, float] = {}
        self.counts_: dict[Modality, int] = {}
        for modality in Modality:
            tokens, seconds = modality_points(records, modality)
            line = self.fit_line(modality, tokens, seconds)
            self.lines_[modality] = line
            self.mae_s_[modality] = float(np.mean(np.abs(line.seconds(tokens) - seconds)))
            self.counts_[modality] = len(tokens)
        return self

    def fit_line(self, modality: Modality, tokens: np.ndarray, seconds: np.ndarray) -> PrefillLine:
        """One modality's line through (prompt tokens, admission seconds): least squares for text,
        the `quantile` for image and video."""
        return fit_line(tokens, seconds, self.quantile if modality in QUANTILE_MODALITIES else None)

    def estimate(self, request: RequestFeatures) -> CostEstimate:
        seconds = self.lines_[request.modality].seconds(request.prompt_tokens)
        return CostEstimate(prefill_s=seconds, memory_tokens=request.prompt_tokens)

    def predict_cost(self, feature_matrix: np.ndarray) -> np.ndarray:
        """[n, 3] features -> [n, 3] cost (prefill seconds, memory tokens, modality tokens)."""
        modality = feature_matrix[:, cols.MODALITY].astype(np.int64)
        intercepts = np.array([self.lines_[m].intercept for m in Modality])[modality]
        slopes = np.array([self.lines_[m].slope for m in Modality])[modality]
        prompt = feature_matrix[:, cols.PROMPT_TOKENS].astype(np.float64)
        return np.column_stack(
            [intercepts + slopes * prompt, prompt, feature_matrix[:, cols.MODALITY_TOKENS]]
        )

    def to_sklearn(self) -> Pipeline:
        """The same function as one scikit-learn pipeline, for export with skl2onnx.

        One-hot modality and its products with the token counts feed a three-target linear map whose
        weights are the fitted lines: prefill = sum_m onehot_m * (intercept_m + slope_m * prompt_tokens).
        """
        encode = ColumnTransformer(
            [
                (
                    "modality",
                    OneHotEncoder(categories=[[float(m.index) for m in Modality]], sparse_output=False),
                    [cols.MODALITY],
                ),
                ("tokens", "passthrough", [cols.PROMPT_TOKENS, cols.MODALITY_TOKENS]),
            ]
        )
        expand = PolynomialFeatures(degree=2, interaction_only=True, include_bias=False)
        layout = np.zeros((1, cols.NUM_FEATURES), dtype=np.float64)
        names = list(
            expand.fit(encode.fit(layout).transform(layout)).get_feature_names_out(
                ["text", "image", "video", "prompt", "visual"]
            )
        )
        weights = np.zeros((cols.NUM_COST_COLUMNS, len(names)))
        for modality in Modality:
            line = self.lines_[modality]
            weights[cols.PREFILL_S, names.index(modality.value)] = line.intercept
            weights[cols.PREFILL_S, names.index(f"{modality.value} prompt")] = line.slope
        weights[cols.MEMORY_TOKENS, names.index("prompt")] = 1.0
        weights[cols.COST_MODALITY_TOKENS, names.index("visual")] = 1.0
        linear = LinearRegression(fit_intercept=False)
        linear.coef_ = weights
        linear.intercept_ = np.zeros(cols.NUM_COST_COLUMNS)
        linear.n_features_in_ = len(names)
        return Pipeline([("encode", encode), ("expand", expand), ("linear", linear)])
