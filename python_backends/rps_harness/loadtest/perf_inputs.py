"""Input data for NVIDIA perf_analyzer (`--input-data FILE`): ensemble requests of every modality.

perf_analyzer cycles through the entries of `data`; each names its tensors with `content` (flattened
values) and `shape`. The image and video inputs are BYTES tensors whose elements are base64 text,
which JSON carries as plain strings. perf_analyzer wants one input set for all entries of a file,
and a text request has no image or video input, so each modality gets a file of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.client import Generation
from rps_harness.loadtest.replay import build_requests
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.mixes import mix_by_name
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.trace import generate_trace
from rps_serve.requests import Modality


def _entry(generation: Generation) -> dict[str, Any]:
    entry = {}
    for name, array in generation.tensors().items():
        values = [v.decode() if isinstance(v, bytes) else v.item() for v in array.reshape(-1)]
        entry[name] = {"content": values, "shape": list(array.shape)}
    return entry


def perf_input_data(generations: Sequence[Generation]) -> dict[str, Any]:
    """perf_analyzer's input-data JSON for `generations`, which must all carry the same inputs."""
    entries = [_entry(g) for g in generations]
    names = {frozenset(e) for e in entries}
    if len(names) > 1:
        raise ValueError(
            f"perf_analyzer needs one input set for all entries, got {sorted(map(sorted, names))}"
        )
    return {"data": entries}


def perf_input_files(
    out: Path, served: RequestFormat, per_modality: int, seed: int, max_tokens: int = 16
) -> dict[Modality, Path]:
    """One input-data file per modality under `out` (`text.json`, `image.json`, `video.json`).

    Requests come from a mixed trace (token counts of the paper's workloads, sized to the model),
    with fresh content for each entry; outputs are capped at `max_tokens`.
    """
    trace = generate_trace(mix_by_name("mixed-iii"), 1.0, 40 * per_modality, seed)
    limits = ContentLimits(max_text_tokens=2048, max_output_tokens=max_tokens)
    generations = build_requests(trace, served, limits, seed)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for modality in Modality:
        rows = np.flatnonzero(trace.modality == modality.index)[:per_modality]
        if rows.size < per_modality:
            raise ValueError(f"the trace has only {rows.size} {modality.value} requests")
        path = out / f"{modality.value}.json"
        path.write_text(json.dumps(perf_input_data([generations[r] for r in rows])) + "\n")
        files[modality] = path
    return files
