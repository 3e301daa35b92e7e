"""GPU utilization during a load run, sampled with NVML (pynvml) in a background thread.

Without NVML (no NVIDIA driver, e.g. the CPU stack) the sampler says why and reports no value:
the run goes on, and the report's utilization is null.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuUtilization:
    """Time-averaged busy fraction of all GPUs together (None when unavailable)."""

    utilization: float | None
    devices: int
    samples: int
    unavailable: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "utilization": self.utilization,
            "devices": self.devices,
            "samples": self.samples,
            "unavailable": self.unavailable,
        }


def time_average(times_s: list[float], values: list[float]) -> float | None:
    """Trapezoid average of a sampled signal over its sampled span (the one value if only one)."""
    if not values:
        return None
    if len(values) == 1 or times_s[-1] <= times_s[0]:
        return sum(values) / len(values)
    area = sum(
        (t1 - t0) * (v0 + v1) / 2
        for t0, t1, v0, v1 in zip(times_s, times_s[1:], values, values[1:], strict=False)
    )
    return area / (times_s[-1] - times_s[0])


class GpuSampler:
    """`with GpuSampler() as gpu: ...` then `gpu.result()`: mean utilization of every visible GPU."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[Any] = []
        self._times: list[float] = []
        self._values: list[float] = []
        self._unavailable: str | None = None
        self._nvml: Any = None

    def __enter__(self) -> GpuSampler:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            if not self._handles:
                raise RuntimeError("NVML sees no GPU")
        except Exception as error:  # pynvml raises its own NVMLError family; any failure means "no GPU data"
            self._unavailable = f"{type(error).__name__}: {error}"
            logger.info("GPU utilization unavailable (%s)", self._unavailable)
            return self
        self._nvml = pynvml
        self._thread = threading.Thread(target=self._sample, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                busy = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
            except Exception as error:  # a GPU that stops answering ends sampling, not the run
                self._unavailable = f"{type(error).__name__}: {error}"
                return
            self._times.append(time.monotonic())
            self._values.append(sum(busy) / len(busy) / 100.0)
            self._stop.wait(self._interval_s)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._nvml.nvmlShutdown()

    def result(self) -> GpuUtilization:
        average = time_average(self._times, self._values)
        unavailable = self._unavailable if average is None else None
        return GpuUtilization(average, len(self._handles), len(self._values), unavailable)
