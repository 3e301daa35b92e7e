"""Replays a workload trace against a running server through tritonclient (one gRPC stream) and
records per-request arrival, first-token and finish times on the client's clock."""

from __future__ import annotations

import logging
import random
import time

import numpy as np

from rps_serve.metrics import RequestRecords
from rps_serve.requests import RequestClass
from rps_serve.tiny_model import TinyModelSpec
from rps_serve.triton.client import Generation, StreamClient, encode_image, encode_video
from rps_serve.workload.media import random_image, random_video
from rps_serve.workload.prompts import chat_prompt, filler_text
from rps_serve.workload.shapes import RequestKind
from rps_serve.workload.trace import Trace

logger = logging.getLogger(__name__)

ENSEMBLE = "rps_ensemble"
_KINDS = list(RequestKind)
# Bounds on the words of filler text per request kind (one token a word with the tiny model's tokenizer):
# short text tens to a few hundred tokens, long text about 1.5K, images and videos a short question.
TEXT_WORDS = {
    RequestKind.SHORT_TEXT: (20, 200),
    RequestKind.LONG_TEXT: (1200, 1800),
    RequestKind.IMAGE: (20, 60),
    RequestKind.VIDEO: (20, 60),
}
OUTPUT_TOKENS = (4, 32)


def build_requests(trace: Trace, media: TinyModelSpec, seed: int) -> list[Generation]:
    """One fresh request per trace row: new filler text and new random pixels, so no cache hits."""
    rng = random.Random(seed)
    pixels = np.random.default_rng(seed)
    return [build_request(trace, row, media, rng, pixels) for row in range(len(trace))]


def build_request(
    trace: Trace, row: int, media: TinyModelSpec, rng: random.Random, pixels: np.random.Generator
) -> Generation:
    """The request of one trace row, its text and pixels drawn from `rng` and `pixels`."""
    kind = _KINDS[int(trace.kind[row])]
    low, high = TEXT_WORDS[kind]
    words = int(np.clip(trace.prompt_tokens[row] - trace.modality_tokens[row], low, high))
    images: tuple[bytes, ...] = ()
    video = None
    if kind is RequestKind.IMAGE:
        images = (encode_image(random_image(media.image_size, media.image_size, pixels)),)
    elif kind is RequestKind.VIDEO:
        frames = random_video(media.video_frames, media.video_size, media.video_size, pixels)
        video = encode_video(frames)
    max_tokens = int(np.clip(trace.output_tokens[row], *OUTPUT_TOKENS))
    return Generation(
        chat_prompt(filler_text(words, rng), kind.modality),
        images,
        video,
        sampling_parameters={"max_tokens": max_tokens, "ignore_eos": True},
    )


def replay(
    url: str, trace: Trace, requests: list[Generation], model: str = ENSEMBLE, timeout_s: float = 900.0
) -> RequestRecords:
    """Send `requests` at the trace's arrival times and wait for all of them."""
    client = StreamClient(url)
    sent = np.full(len(trace), np.nan)
    start = time.monotonic()
    try:
        for row, generation in enumerate(requests):
            delay = start + trace.arrival_s[row] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent[row] = time.monotonic()
            client.submit(model, f"r{row}", generation.tensors())
        results = [client.wait(f"r{row}", timeout_s) for row in range(len(requests))]
    finally:
        client.close()
    failed = [r.error for r in results if r.error]
    if failed:
        logger.warning("%d requests failed, e.g. %s", len(failed), failed[0])
    levels = [
        RequestClass.from_label(r.outputs["rps_class"][0].decode()).value if "rps_class" in r.outputs else 0
        for r in results
    ]
    return RequestRecords(
        arrival_s=sent - start,
        first_token_s=np.array([_or_nan(r.first_response_s) for r in results]) - start,
        finish_s=np.array([np.nan if r.error else _or_nan(r.done_s) for r in results]) - start,
        output_tokens=np.array([len(r.chunks) for r in results]),
        modality=np.array([_KINDS[int(k)].modality.index for k in trace.kind]),
        level=np.array(levels),
        num_levels=len(RequestClass),
    )


def warm_up(url: str, media: TinyModelSpec, seed: int) -> None:
    """One request of each modality, one after another: the first of each kind pays one-off costs."""
    rows = [RequestKind.SHORT_TEXT, RequestKind.IMAGE, RequestKind.VIDEO]
    trace = Trace(
        arrival_s=np.zeros(len(rows)),
        kind=np.array([_KINDS.index(k) for k in rows]),
        prompt_tokens=np.full(len(rows), 40),
        modality_tokens=np.zeros(len(rows), dtype=np.int64),
        output_tokens=np.full(len(rows), 4),
    )
    for generation in build_requests(trace, media, seed):
        client = StreamClient(url)
        try:
            client.submit(ENSEMBLE, "warm-up", generation.tensors())
            result = client.wait("warm-up")
        finally:
            client.close()
        if result.error:
            raise RuntimeError(f"warm-up request failed: {result.error}")


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value
