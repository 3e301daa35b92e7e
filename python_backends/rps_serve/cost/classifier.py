"""Request Classifier: k-means on scaled (latency, memory) cost, clusters ordered light to heavy."""

from __future__ import annotations

import enum

import numpy as np
from sklearn.cluster import KMeans
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import PowerTransformer, StandardScaler

from rps_serve.cost import features as cols

MIN_CLASSES, MAX_CLASSES = 2, 5


class MemoryFeature(enum.Enum):
    """Which cost column the classifier uses as the memory coordinate."""

    PREFILL_TOKENS = "prefill_tokens"  # the paper's: KV-cache footprint
    MODALITY_TOKENS = "modality_tokens"  # the public artifact's choice

    @property
    def column(self) -> int:
        if self is MemoryFeature.PREFILL_TOKENS:
            return cols.MEMORY_TOKENS
        return cols.COST_MODALITY_TOKENS


class RequestClassifier:
    """k-means (Euclidean) on standard-scaled (prefill seconds, memory), optionally Yeo-Johnson first.

    After fitting, cluster indices are renumbered by the sum of their centroid coordinates in the
    scaled space, so the predicted label is the class level: 0 = sand (lightest) ... k-1 = rocks.
    """

    def __init__(
        self,
        num_classes: int = 3,
        power_transform: bool = False,
        memory_feature: MemoryFeature = MemoryFeature.PREFILL_TOKENS,
        random_state: int = 0,
    ) -> None:
        self.num_classes = num_classes
        self.power_transform = power_transform
        self.memory_feature = memory_feature
        self.random_state = random_state

    def fit(self, cost: np.ndarray) -> RequestClassifier:
        """Fit on an [n, 3] cost matrix (columns as in `cost.features`)."""
        if not MIN_CLASSES <= self.num_classes <= MAX_CLASSES:
            raise ValueError(f"num_classes must be in {MIN_CLASSES}..{MAX_CLASSES}, got {self.num_classes}")
        steps: list[tuple[str, object]] = [
            (
                "select",
                ColumnTransformer([("cost", "passthrough", [cols.PREFILL_S, self.memory_feature.column])]),
            ),
        ]
        if self.power_transform:
            steps.append(("power", PowerTransformer(method="yeo-johnson", standardize=False)))
        steps.append(("scale", StandardScaler()))
        kmeans = KMeans(n_clusters=self.num_classes, n_init=10, random_state=self.random_state)
        steps.append(("kmeans", kmeans))
        pipeline = Pipeline(steps)
        pipeline.fit(np.asarray(cost, dtype=np.float64))

        order = np.argsort(kmeans.cluster_centers_.sum(axis=1), kind="stable")
        kmeans.cluster_centers_ = kmeans.cluster_centers_[order]
        kmeans.labels_ = np.argsort(order)[kmeans.labels_]
        self.pipeline_ = pipeline
        self.centroids_ = kmeans.cluster_centers_.copy()
        self.class_counts_ = np.bincount(kmeans.labels_, minlength=self.num_classes)
        return self

    def predict(self, cost: np.ndarray) -> np.ndarray:
        """Class level (int64) of every row of an [n, 3] cost matrix."""
        levels: np.ndarray = self.pipeline_.predict(np.asarray(cost, dtype=np.float64))
        return levels.astype(np.int64)
