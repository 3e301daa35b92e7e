"""Stages before the engine: front-end preprocessing and, in ModServe mode, encoder GPUs.

Both are pools of identical workers; a free worker takes the next ready request. The encoder GPUs
and the stock policies' front end take requests in arrival order. Under the class-aware policies the
front end takes them in order of (class level, arrival), as `vllm_model`'s front-end workers decode
and render (`triton.front_end`): a text never queues behind media waiting for a worker.

Preprocessing costs are assumptions (no profile records them): tokenizing and templating text,
decoding and resizing an image into its anyres tiles, extracting and resizing video frames, at
rates of a server CPU core. On the CPU test stack the same stage is ~60 ms of a short text's
TTFT under load (ENVIRONMENT.md); on H100 it is small next to queueing but not zero.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from rps_serve.requests import Modality
from rps_serve.workload.shapes import IMAGE_TOKENS_PER_TILE, VIDEO_TOKENS_PER_FRAME


@dataclass(frozen=True)
class PreprocessCosts:
    """Front-end CPU seconds per request: a base per modality plus a cost per token or media unit."""

    text_base_s: float = 1e-3
    text_token_s: float = 1e-6
    image_base_s: float = 5e-3
    image_tile_s: float = 4e-3
    video_base_s: float = 15e-3
    video_frame_s: float = 3e-3
    workers: int = 1

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


def worker_pool(
    ready_s: np.ndarray, service_s: np.ndarray, workers: int, levels: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Finish time of every job on `workers` workers, and the pool's total busy seconds.

    A free worker takes, among the jobs ready by then, the one of lowest level (when `levels` is
    given), then earliest ready, then lowest index; a job with zero service passes straight through.
    """
    if workers < 1:
        raise ValueError(f"need at least one worker, got {workers}")
    done = np.array(ready_s, dtype=np.float64)
    service = np.asarray(service_s, dtype=np.float64)
    ready_list, service_list = done.tolist(), service.tolist()
    level_list = [0] * len(done) if levels is None else np.asarray(levels).tolist()
    arrivals = [i for i in np.argsort(done, kind="stable").tolist() if service_list[i] > 0.0]
    free_at = [0.0] * workers
    waiting: list[tuple[int, float, int]] = []
    next_arrival = 0
    while next_arrival < len(arrivals) or waiting:
        now = heapq.heappop(free_at)
        if not waiting:
            now = max(now, ready_list[arrivals[next_arrival]])
        while next_arrival < len(arrivals) and ready_list[arrivals[next_arrival]] <= now:
            job = arrivals[next_arrival]
            heapq.heappush(waiting, (level_list[job], ready_list[job], job))
            next_arrival += 1
        _, _, job = heapq.heappop(waiting)
        done[job] = now + service_list[job]
        heapq.heappush(free_at, float(done[job]))
    return done, float(np.sum(service))
