"""A stand-in for the Python backend's custom metrics API (`pb_utils.MetricFamily`) that keeps what a
model published: each family's kind and its series with their labels and values."""

from __future__ import annotations

from typing import Any


class RecordedMetric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)

    def increment(self, value: float) -> None:
        self.value += value

    def observe(self, value: float) -> None:
        self.value += value


class RecordedFamily:
    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.series: list[RecordedMetric] = []

    # Triton's method name.
    def Metric(self, labels: dict[str, str], **extra: Any) -> RecordedMetric:
        metric = RecordedMetric(labels)
        self.series.append(metric)
        return metric


class RecordingPbUtils:
    """`pb_utils` as far as the metrics go; `published` fills, by name, as a model creates families."""

    def __init__(self) -> None:
        self.published: dict[str, RecordedFamily] = {}
        published = self.published

        class MetricFamily:
            COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

            def __new__(cls, name: str, description: str, kind: str) -> Any:
                assert name not in published, f"{name} is published twice"
                published[name] = RecordedFamily(name, kind)
                return published[name]

        self.MetricFamily = MetricFamily
