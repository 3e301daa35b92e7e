"""Where time to first token goes: front end, the engine step in progress, queueing, the last step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rps_harness.sim.engine import StepRecord
from rps_serve.requests import Modality


@dataclass(frozen=True)
class TtftParts:
    """Seconds per request; the four parts add up to its TTFT.

    `preprocess_s`: arrival to when the engine sees it (front-end wait and work, remote encoding);
    `in_progress_s`: the rest of the engine step running at that moment (steps are not interrupted);
    `queued_s`: later steps until the one that yields its first token (waiting, and earlier prefill chunks);
    `final_step_s`: that last step, which the request shares with everything else scheduled in it.
    """

    preprocess_s: np.ndarray
    in_progress_s: np.ndarray
    queued_s: np.ndarray
    final_step_s: np.ndarray


def ttft_parts(
    arrival_s: np.ndarray, ready_s: np.ndarray, first_token_s: np.ndarray, steps: Sequence[StepRecord]
) -> TtftParts:
    """Split the TTFT of requests that got a first token, from the engine's step records (in order)."""
    starts = np.array([s.start_s for s in steps])
    ends = starts + np.array([s.duration_s for s in steps])
    # A first token is stamped at the end of its step with the same sum, so the lookup is exact.
    final = np.searchsorted(ends, first_token_s)
    running = np.searchsorted(starts, ready_s, side="right") - 1
    in_progress = np.where(running >= 0, np.clip(ends[np.maximum(running, 0)] - ready_s, 0.0, None), 0.0)
    queued = starts[final] - ready_s - in_progress
    return TtftParts(ready_s - arrival_s, in_progress, queued, ends[final] - starts[final])


def stage_means(
    arrival_s: np.ndarray, ready_s: np.ndarray, first_token_s: np.ndarray, modality: np.ndarray
) -> dict[str, dict[str, float | None]]:
    """Per modality (and "all"), the mean seconds of the front end (arrival to when the engine sees a
    request) and of the engine (from then to the first token), over requests that got one; None
    where none did. What a server's run log splits the same way (`triton.run_log`)."""
    done = np.isfinite(first_token_s)
    groups = {"all": done, **{m.value: done & (modality == m.index) for m in Modality}}

    def mean(values: np.ndarray, mask: np.ndarray) -> float | None:
        return float(values[mask].mean()) if mask.any() else None

    return {
        name: {
            "front_end_s": mean(ready_s - arrival_s, mask),
            "engine_s": mean(first_token_s - ready_s, mask),
        }
        for name, mask in groups.items()
    }
