"""What a running local server looks like from outside: its Prometheus metrics and its processes' memory."""

from __future__ import annotations

import os
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.parser import text_string_to_metric_families

from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p


@dataclass(frozen=True)
class MetricsSnapshot:
    """The samples of one scrape: (name, labels) -> value. Counter samples are named as
    prometheus_client's parser names them: ending in `_total`, which it adds where a name lacks it
    (Triton's own `nv_inference_count` reads `nv_inference_count_total`)."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def total(self, name: str, **labels: str) -> float:
        """The sum of `name` over the series whose labels include `labels` (0 when there is none)."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)

    def value(self, name: str, **labels: str) -> float | None:
        """The one series of `name` with exactly `labels`, if it exists."""
        return self.samples.get((name, frozenset(labels.items())))


def scrape(metrics_url: str, timeout_s: float = 10.0) -> MetricsSnapshot:
    with urllib.request.urlopen(metrics_url, timeout=timeout_s) as reply:
        text = reply.read().decode()
    return MetricsSnapshot(
        {
            (sample.name, frozenset(sample.labels.items())): float(sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
    )


@dataclass(frozen=True)
class ServedFit:
    """The online cost model as a server's metrics show it (`triton.online_costs`)."""

    updates: int
    observed: int  # prefill costs observed
    boundary_updates: int  # updates that moved the class boundaries
    lines: dict[Modality, PrefillLine]  # the fit in service

    def as_json(self) -> dict[str, Any]:
        return {
            "updates": self.updates,
            "observed": self.observed,
            "boundary_updates": self.boundary_updates,
            "lines": {m.value: asdict(line) for m, line in self.lines.items()},
        }

    @classmethod
    def of(cls, snapshot: MetricsSnapshot, model: str = p.VLLM_MODEL) -> ServedFit | None:
        """None where `model` does not refit its cost model online (it shows no fit)."""
        lines = {}
        for modality in Modality:
            intercept, slope = (
                snapshot.value("rps_cost_model_line", model=model, modality=modality.value, term=term)
                for term in ("intercept", "slope")
            )
            if intercept is None or slope is None:
                return None
            lines[modality] = PrefillLine(intercept, slope)
        return cls(
            updates=int(snapshot.total("rps_cost_model_updates_total", model=model)),
            observed=int(snapshot.total("rps_cost_model_observed_total", model=model)),
            boundary_updates=int(snapshot.total("rps_class_boundary_updates_total", model=model)),
            lines=lines,
        )


def server_process(grpc_port: int) -> psutil.Process:
    """The tritonserver listening on `grpc_port` (found by its command line)."""
    flag = f"--grpc-port={grpc_port}"
    for process in psutil.process_iter(["cmdline"]):
        if flag in (process.info["cmdline"] or ()):
            return process
    raise LookupError(f"no tritonserver with {flag}")


def process_label(process: psutil.Process) -> str:
    """A short name for a server process: `tritonserver`, `stub <model>`, `VLLM::EngineCore`, ..."""
    cmdline = process.cmdline()
    name = Path(cmdline[0]).name if cmdline else process.name()  # vLLM retitles its processes there
    if name == "triton_python_backend_stub":  # its first argument is <repository>/<model>/<version>/model.*
        return f"stub {Path(cmdline[1]).parts[-3]}"
    return name


def tree_rss_by_process(root: psutil.Process) -> dict[str, int]:
    """Resident memory of the server, its Python-backend stubs and vLLM's engine core, per process label."""
    rss: dict[str, int] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            label = process_label(process)
            rss[label] = rss.get(label, 0) + process.memory_info().rss
        except psutil.NoSuchProcess:  # a process that ended between listing and reading
            continue
    return rss


def backend_shm_bytes(root: psutil.Process) -> dict[str, int]:
    """Memory held by each Python-backend stub's shared-memory region (tmpfs pages in use), per stub label.

    Triton and the stub both map the region, so its pages count in the resident memory of both.
    """
    held: dict[str, int] = {}
    for process in root.children():
        try:
            label, cmdline = process_label(process), process.cmdline()
            if label.startswith("stub "):  # its second argument names the region
                held[label] = os.stat(Path("/dev/shm") / cmdline[2]).st_blocks * 512
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
    return held
