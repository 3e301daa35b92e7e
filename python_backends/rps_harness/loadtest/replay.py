"""Replays a workload trace against a running server through tritonclient (one gRPC stream) and
records per-request arrival, first-token and finish times on the client's clock."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rps_harness.client import (
    Generation,
    StreamClient,
    StreamResult,
    Tally,
    encode_image,
    encode_video,
)
from rps_harness.metrics import RequestRecords, concatenate_records
from rps_harness.workload.content import ContentLimits, RequestContent, plan_content
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace
from rps_serve.requests import RequestClass
from rps_serve.triton import protocol as p

logger = logging.getLogger(__name__)

_KINDS = list(RequestKind)
# Deadlines (see `drain_allowance_s`): slack over serving everything one at a time, and per request what
# a slow CPU needs when its isolated time was not measured.
DRAIN_FLOOR_S = 120.0
SLOW_FACTOR = 3.0
ALLOWANCE_PER_REQUEST_S = 2.0
ALLOWANCE_PER_TOKEN_S = 0.05


def generation(content: RequestContent) -> Generation:
    """The ensemble request carrying `content` (media encoded as files), with exactly its output length."""
    images = () if content.image is None else (encode_image(content.image),)
    video = None if content.video is None else encode_video(content.video)
    sampling = {"max_tokens": content.max_tokens, "ignore_eos": True}
    return Generation(content.prompt, images, video, sampling_parameters=sampling)


def build_requests(trace: Trace, served: RequestFormat, limits: ContentLimits, seed: int) -> list[Generation]:
    """One fresh request per trace row (`plan_content`): new filler text and new pixels, so no cache hits."""
    return [generation(content) for content in plan_content(trace, served, limits).contents(served, seed)]


@dataclass(frozen=True)
class Replayed:
    """A replay's per-request records and how its requests ended."""

    records: RequestRecords
    tally: Tally
    errors: list[str]  # distinct error messages, refusals included
    clock_origin_s: float = 0.0  # the records' time 0 on this machine's monotonic clock


def drain_allowance_s(
    requests: Sequence[Generation], isolated_e2e_s: Sequence[float] | np.ndarray | None = None
) -> float:
    """How long after the last request is sent its answers may take before the rest count as lost.

    Generous on purpose (a deadline catches hangs; it does not judge speed): every request served one
    after another, each taking `SLOW_FACTOR` times its isolated end-to-end time where that was measured
    (`isolated_e2e_s`, one per request), else an allowance per request and output token.
    """
    if isolated_e2e_s is None:
        isolated_e2e_s = [
            ALLOWANCE_PER_REQUEST_S + ALLOWANCE_PER_TOKEN_S * int(r.sampling_parameters.get("max_tokens", 16))
            for r in requests
        ]
    return DRAIN_FLOOR_S + SLOW_FACTOR * float(np.nansum(isolated_e2e_s))


def replay(
    url: str,
    trace: Trace,
    requests: list[Generation],
    model: str = p.ENSEMBLE,
    drain_s: float | None = None,
    progress: bool = False,
) -> Replayed:
    """Send `requests` at the trace's arrival times on one gRPC stream and wait for all of them, at most
    `drain_s` after the last was sent (default `drain_allowance_s`); requests still without an answer
    then are lost: cancelled, and left out of the records' completed rows."""
    from tqdm import tqdm

    client = StreamClient(url)
    sent = np.full(len(trace), np.nan)
    start = time.monotonic()
    lost = False
    try:
        for row, generation in enumerate(tqdm(requests, desc="sent", unit="req", disable=not progress)):
            delay = start + trace.arrival_s[row] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent[row] = time.monotonic()
            client.submit(model, f"r{row}", generation.tensors())
        allowance = drain_allowance_s(requests) if drain_s is None else drain_s
        tally = client.wait_all(time.monotonic() + allowance)
        lost = tally.lost > 0
    finally:
        client.close(cancel_requests=lost)
    results = [client.results[f"r{row}"] for row in range(len(requests))]
    if lost:
        logger.warning("%d requests got no answer within %.0f s of the last one sent", tally.lost, allowance)
    errors = sorted({r.error for r in results if r.error} | set(client.unattributed_errors))
    if tally.failed:
        logger.warning("%d requests failed, e.g. %s", tally.failed, errors[0])
    levels = [
        RequestClass.from_label(r.outputs["rps_class"][0].decode()).value if "rps_class" in r.outputs else 0
        for r in results
    ]
    records = RequestRecords(
        arrival_s=sent - start,
        first_token_s=np.array([_or_nan(r.first_response_s) for r in results]) - start,
        finish_s=np.array([np.nan if r.error else _or_nan(r.done_s) for r in results]) - start,
        output_tokens=np.array([_output_tokens(g, r) for g, r in zip(requests, results, strict=True)]),
        modality=np.array([_KINDS[int(k)].modality.index for k in trace.kind]),
        level=np.array(levels),
        num_levels=len(RequestClass),
        kind=np.asarray(trace.kind),
    )
    return Replayed(records, tally, errors, clock_origin_s=start)


def one_at_a_time(
    url: str, trace: Trace, requests: list[Generation], model: str = p.ENSEMBLE
) -> RequestRecords:
    """Each request alone on `model` (the next is sent when the last has finished): isolated runs."""
    runs = [replay(url, _single(trace, row), [request], model=model) for row, request in enumerate(requests)]
    failed = [run for run in runs if run.tally.completed < run.tally.sent]
    if failed:
        example = failed[0].errors[0] if failed[0].errors else "no answer"
        raise RuntimeError(
            f"{len(failed)} of {len(runs)} isolated requests did not complete ({example}); see the server log"
        )
    return concatenate_records([run.records for run in runs])


def warm_up(url: str, served: RequestFormat, seed: int, model: str = p.ENSEMBLE) -> None:
    """One request of each modality, one after another to `model`: the first of each kind pays one-off
    costs."""
    rows = [RequestKind.SHORT_TEXT, RequestKind.IMAGE, RequestKind.VIDEO]
    trace = Trace(
        arrival_s=np.zeros(len(rows)),
        kind=np.array([_KINDS.index(k) for k in rows]),
        prompt_tokens=np.full(len(rows), 40),
        modality_tokens=np.zeros(len(rows), dtype=np.int64),
        output_tokens=np.full(len(rows), 4),
    )
    one_at_a_time(url, trace, build_requests(trace, served, ContentLimits(max_text_tokens=64), seed), model)


def _single(trace: Trace, row: int) -> Trace:
    return Trace(
        arrival_s=np.zeros(1),
        kind=trace.kind[row : row + 1],
        prompt_tokens=trace.prompt_tokens[row : row + 1],
        modality_tokens=trace.modality_tokens[row : row + 1],
        output_tokens=trace.output_tokens[row : row + 1],
    )


def _output_tokens(generation: Generation, result: StreamResult) -> int:
    """Tokens generated: `max_tokens` exactly under ignore_eos; else the streamed chunks, which under
    load may carry several tokens each, so a lower bound."""
    sampling = generation.sampling_parameters
    if sampling.get("ignore_eos") and "max_tokens" in sampling and not result.error:
        return int(sampling["max_tokens"])
    return len(result.chunks)


def _or_nan(value: float | None) -> float:
    return np.nan if value is None else value
