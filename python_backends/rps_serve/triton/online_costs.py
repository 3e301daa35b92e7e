"""The online cost model in `vllm_model`: the engine's observed prefill costs, read as the engine writes
them, refit the fit in service (`cost.online`), and the metrics that show it.

The RPS scheduler runs in vLLM's engine-core process and appends a record per completed prefill to a
JSON-lines file (`RPSConfig.observed_costs`); a thread of `vllm_model` reads the new lines every
`interval_s` and updates the cost model, off the asyncio loop. Only the plug-in's policies observe
costs: under the stock baselines the fit stays as the repository holds it.

Metrics (label `model`): `rps_cost_model_updates_total`, `rps_cost_model_observed_total` (prefills
observed), `rps_class_boundary_updates_total` (updates that moved the class boundaries);
`rps_cost_model_line` (`modality`, `term` = intercept seconds or slope seconds per token), the fit in
service; `rps_cost_model_abs_error_seconds` (`modality`), the mean absolute error of the estimate
against the prefills observed since the previous update; `rps_class_centroid` (`rps_class`,
`coordinate` = prefill_seconds or memory_tokens), the mean estimated cost of the requests served
lately in each class.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rps_serve.cost.online import CostModelUpdate, OnlineCostModel
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality, RequestClass
from rps_serve.triton.settings import ServingSettings

logger = logging.getLogger(__name__)


class CostModelMetrics:
    """The online fit on Triton's metrics endpoint; `pb_utils` is the Python backend's utility module.
    Call it on the thread that calls Triton (the loop's)."""

    def __init__(self, pb_utils: Any, model: str, lines: Mapping[Modality, PrefillLine]) -> None:
        family = pb_utils.MetricFamily
        self._families: list[Any] = []

        def metric(name: str, description: str, kind: Any) -> Any:
            created = family(name=name, description=description, kind=kind)
            self._families.append(created)
            return created

        counter, gauge = family.COUNTER, family.GAUGE
        updates = metric("rps_cost_model_updates_total", "Online cost-model updates", counter)
        observed = metric("rps_cost_model_observed_total", "Prefill costs observed", counter)
        moved = metric("rps_class_boundary_updates_total", "Updates that moved the class boundaries", counter)
        line = metric("rps_cost_model_line", "The fit in service: intercept s, slope s per token", gauge)
        error = metric(
            "rps_cost_model_abs_error_seconds", "Mean |estimate - observed| since the last update", gauge
        )
        centroid = metric(
            "rps_class_centroid", "Mean estimated cost of the recent requests in a class", gauge
        )
        self._counters = {
            name: created.Metric(labels={"model": model})
            for name, created in (("updates", updates), ("observed", observed), ("moved", moved))
        }
        self._line = {
            (m, term): line.Metric(labels={"model": model, "modality": m.value, "term": term})
            for m in Modality
            for term in ("intercept", "slope")
        }
        self._error = {m: error.Metric(labels={"model": model, "modality": m.value}) for m in Modality}
        self._centroid = {
            (c, coordinate): centroid.Metric(
                labels={"model": model, "rps_class": c.label, "coordinate": coordinate}
            )
            for c in RequestClass
            for coordinate in ("prefill_seconds", "memory_tokens")
        }
        self._show_lines(lines)

    def _show_lines(self, lines: Mapping[Modality, PrefillLine]) -> None:
        for m, fitted in lines.items():
            self._line[m, "intercept"].set(fitted.intercept)
            self._line[m, "slope"].set(fitted.slope)

    def updated(self, update: CostModelUpdate) -> None:
        self._counters["updates"].increment(1)
        self._counters["observed"].increment(update.new_records)
        if update.boundaries_moved:
            self._counters["moved"].increment(1)
        self._show_lines(update.lines_after)
        for m, error in update.abs_error_s.items():
            self._error[m].set(error)
        for level, (seconds, tokens) in enumerate(update.centroids or []):
            cls = RequestClass.for_level(level, len(update.centroids or []))
            self._centroid[cls, "prefill_seconds"].set(seconds)
            self._centroid[cls, "memory_tokens"].set(tokens)

    def close(self) -> None:
        """Drop the metrics before their families (the other order crashes the stub at shutdown)."""
        self._counters.clear()
        self._line.clear()
        self._error.clear()
        self._centroid.clear()
        self._families.clear()


def observing_costs(settings: ServingSettings) -> ServingSettings:
    """`settings` with the engine recording observed prefill costs: to the file the RPS scheduler's
    settings name (`observed_costs`), else to a new one of the server's own."""
    if settings.rps.get("observed_costs"):
        return settings
    path = Path(tempfile.mkdtemp(prefix="rps-observed-costs-")) / "observed_costs.jsonl"
    return replace(settings, rps={**settings.rps, "observed_costs": str(path)})


class ObservedCostFeed:
    """Reads the engine's observed-cost file every `interval_s` and updates `model`; each update is
    handed to `report` on `loop`."""

    def __init__(
        self,
        model: OnlineCostModel,
        path: Path,
        loop: asyncio.AbstractEventLoop,
        report: Callable[[CostModelUpdate], None],
    ) -> None:
        self._model, self._path, self._loop, self._report = model, path, loop, report
        self._offset = 0  # bytes of the file read so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-model-cost-model", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._model.options.interval_s):
            try:
                self.poll()
            except Exception:  # a bad update must not stop the next, nor the server
                logger.exception("online cost model: update failed")

    def poll(self) -> CostModelUpdate | None:
        records = self._new_records()
        self._model.observe(records)
        update = self._model.update()
        if update is not None:
            self._loop.call_soon_threadsafe(self._report, update)
        return update

    def _new_records(self) -> list[ProfileRecord]:
        """The complete lines written since the last read (a line being written waits for the next)."""
        if not self._path.is_file():
            return []
        with self._path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [ProfileRecord.from_json(line) for line in complete.decode().splitlines() if line.strip()]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
