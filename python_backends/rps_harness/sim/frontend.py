"""Stages before the engine: front-end preprocessing and, in ModServe mode, encoder GPUs.

Both are pools of identical workers; a free worker takes the next ready request. `WorkerPool` runs
a pool online, as jobs arrive; `worker_pool` runs it over a whole trace. The encoder GPUs
and the stock policies' front end take requests in arrival order. Under the class-aware policies the
front end takes them in order of (class level, arrival), as `vllm_model`'s front-end workers decode
and render (`triton.front_end`): a text never queues behind media waiting for a worker.

Preprocessing costs are assumptions (no profile records them): tokenizing and templating text,
decoding and resizing an image into its anyres tiles, extracting and resizing video frames, at
rates of a server CPU core. On the CPU test stack the same stage is ~60 ms of a short text's
TTFT under load; on H100 it is small next to queueing but not zero.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from rps_harness.workload.shapes import IMAGE_TOKENS_PER_TILE, VIDEO_TOKENS_PER_FRAME
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import FRONT_END_WORKERS


@dataclass(frozen=True)
class PreprocessCosts:
    """Front-end CPU seconds per request: a base per modality plus a cost per token or media unit."""

    text_base_s: float = 1e-3
    text_token_s: float = 1e-6
    image_base_s: float = 5e-3
    image_tile_s: float = 4e-3
    video_base_s: float = 15e-3
    video_frame_s: float = 3e-3
    workers: int = FRONT_END_WORKERS

    def seconds(
        self, modality: np.ndarray, prompt_tokens: np.ndarray, modality_tokens: np.ndarray
    ) -> np.ndarray:
        text = self.text_base_s + self.text_token_s * (prompt_tokens - modality_tokens)
        image = self.image_base_s + self.image_tile_s * modality_tokens / IMAGE_TOKENS_PER_TILE
        video = self.video_base_s + self.video_frame_s * modality_tokens / VIDEO_TOKENS_PER_FRAME
        media = np.select(
            [modality == Modality.IMAGE.index, modality == Modality.VIDEO.index], [image, video], 0.0
        )
        return np.asarray(text + media)


class WorkerPool:
    """Identical workers fed online: jobs are submitted in order of ready time and the pool is advanced
    through time; a free worker takes, among the jobs ready by then, the one of lowest level, then
    earliest ready, then lowest id. A job with zero service passes straight through.

    `advance(t)` makes every choice due before `t`, which only needs the jobs ready before `t`: a job
    ready at `t` must be submitted before the pool is advanced past `t`.
    """

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"need at least one worker, got {workers}")
        self._free_at = [0.0] * workers
        self._arrivals: deque[tuple[int, float, float, int]] = deque()  # (level, ready, service, id)
        self._waiting: list[tuple[int, float, int, float]] = []  # heap of (level, ready, id, service)
        self._last_ready = -math.inf

    def submit(self, job: int, ready_s: float, service_s: float, level: int = 0) -> list[tuple[int, float]]:
        """Queue a job; returns `[(job, ready_s)]` if it needs no service, else nothing."""
        if ready_s < self._last_ready:
            raise ValueError(
                f"job {job} is ready at {ready_s}, before an earlier submission ({self._last_ready})"
            )
        self._last_ready = ready_s
        if service_s <= 0.0:
            return [(job, ready_s)]
        self._arrivals.append((level, ready_s, service_s, job))
        return []

    def advance(self, t: float) -> list[tuple[int, float]]:
        """Start every job that a worker takes before `t`; returns (job, finish time) for each."""
        started: list[tuple[int, float]] = []
        free_at, waiting, arrivals = self._free_at, self._waiting, self._arrivals
        while waiting or arrivals:
            now = free_at[0]
            if not waiting:
                now = max(now, arrivals[0][1])
            if now >= t:
                break
            while arrivals and arrivals[0][1] <= now:
                level, ready, service, job = arrivals.popleft()
                heapq.heappush(waiting, (level, ready, job, service))
            _, _, job, service = heapq.heappop(waiting)
            heapq.heapreplace(free_at, now + service)
            started.append((job, now + service))
        return started


def worker_pool(
    ready_s: np.ndarray, service_s: np.ndarray, workers: int, levels: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Finish time of every job on `workers` workers, and the pool's total busy seconds.

    A free worker takes, among the jobs ready by then, the one of lowest level (when `levels` is
    given), then earliest ready, then lowest index; a job with zero service passes straight through.
    """
    pool = WorkerPool(workers)
    done = np.array(ready_s, dtype=np.float64)
    service = np.asarray(service_s, dtype=np.float64)
    ready_list, service_list = done.tolist(), service.tolist()
    level_list = [0] * len(done) if levels is None else np.asarray(levels).tolist()
    for job in np.argsort(done, kind="stable").tolist():
        pool.submit(job, ready_list[job], service_list[job], level_list[job])
    for job, finish in pool.advance(math.inf):
        done[job] = finish
    return done, float(np.sum(service))
