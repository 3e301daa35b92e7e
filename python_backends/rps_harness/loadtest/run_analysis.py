"""Where a run's time went, from the server's run log (`triton.run_log`) over a window of the run: per
engine step (its time, prompt and decode tokens, running and waiting requests, encoder inputs,
preemptions), the `vllm_model` loop's lag, per class each request's stages to its first token and
what shared the step that gave it, what its slowest first tokens waited for, and per class what its
time per output token was made of (the steps it decoded through, by what they ran).

The window is the load client's steady state, on the machine's monotonic clock, so that ramp-up and
drain do not dilute what the engine did under load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.metrics import RequestRecords
from rps_harness.service_bound import EngineRun
from rps_serve.requests import RequestClass

STAGES = ("front_end_queue_s", "front_end_work_s", "vllm_input_s", "engine_queue_s", "prefill_s")
# The part of `vllm_input_s` spent waiting for the engine step in progress (`step_in_progress_waits`).
STEP_IN_PROGRESS = "step_in_progress_s"
# A request record's engine-core times: when it reached the engine core's queue, then its stages there.
ENGINE_TIMES = ("engine_queued", "engine_queue_s", "prefill_s")
# The step that gave a request its first token (`first_token_steps`): the request's prefill stage, the
# step's seconds and prompt tokens, the request's own prompt tokens and the other sand's finishing
# beside it, and the shares of such steps that ran a vision encoder (any, and another request's) and
# that held the request's prefill alone.
FIRST_TOKEN_STEP = (
    "prefill_s",
    "step_s",
    "step_tokens",
    "own_tokens",
    "sand_beside_tokens",
    "encoder",
    "other_encoder",
    "alone",
)
# The slowest share of a class's first tokens (`first_token_tail`): what its P90 is made of.
TAIL_SHARE = 0.2
# Their means (`first_token_tail`): the time to the first token, of it the wait for the step in
# progress, the engine queue and the prefill stage; the step in progress when the request reached vLLM
# (its whole seconds, 0 where none ran, and the share of them that ran a vision encoder) and the step
# that gave its first token (its seconds, and the share that ran another request's encoder).
FIRST_TOKEN_TAIL = (
    "to_first_token_s",
    STEP_IN_PROGRESS,
    "engine_queue_s",
    "prefill_s",
    "in_progress_step_s",
    "in_progress_encoder",
    "first_token_step_s",
    "other_encoder",
)
# A decoding request's time per output token, in milliseconds, by what the steps it sat through ran:
# a vision encoder, a prompt chunk (and no encoder), decodes only; and the time between steps.
TOKEN_PARTS = ("encoder_ms", "prefill_ms", "decode_ms", "between_ms")


def read_run_log(path: Path) -> list[dict[str, Any]]:
    """The log's records in order; an unfinished last line (a server killed mid-write) is skipped."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def in_window(records: Iterable[dict[str, Any]], kind: str, start: float, end: float) -> list[dict[str, Any]]:
    """The `kind` records between `start` and `end`; requests by their arrival, the rest by time."""
    key = "arrival" if kind == "request" else "t"
    return [r for r in records if r["kind"] == kind and start <= r[key] <= end]


MIN_LONE_DECODE_STEPS = 30


def engine_summary(steps: Sequence[dict[str, Any]], window_s: float) -> dict[str, float]:
    """What the engine did over a window of `window_s` seconds, from its steps."""
    timed = [s for s in steps if "step_ms" in s]
    if not timed or window_s <= 0:
        return {"steps": float(len(timed))}
    step_ms = np.array([s["step_ms"] for s in timed])
    prefill = np.array([s["prefill_tokens"] for s in timed])
    decode = np.array([s["decode_requests"] for s in timed])
    encoder = np.array([s["encoder_inputs"] for s in timed])
    lone_decode = step_ms[(prefill == 0) & (decode == 1) & (encoder == 0)]
    return {
        "steps": float(len(timed)),
        "busy": float(step_ms.sum() / 1000 / window_s),
        "step_ms_mean": float(step_ms.mean()),
        "step_ms_p90": float(np.percentile(step_ms, 90)),
        # The mean step a decoding request sits through: what its time per output token is made of.
        "step_ms_per_decode": float((step_ms * decode).sum() / decode.sum()) if decode.any() else math.nan,
        "decode_step_ms": _mean(step_ms[(prefill == 0) & (decode > 0)]),
        "mixed_step_ms": _mean(step_ms[(prefill > 0) & (decode > 0)]),
        "prefill_share": float((prefill > 0).mean()),
        "prefill_tokens_per_step": float(prefill.mean()),
        "decode_requests_per_step": float(decode.mean()),
        "running": float(np.mean([s["running"] for s in timed])),
        "waiting": float(np.mean([s["waiting"] for s in timed])),
        "encoder_inputs": float(encoder.sum()),
        # The machine's speed, whatever the policy: a step that decodes one token of one request and
        # nothing else costs the same under every order, so runs whose medians differ ran on a
        # machine whose speed moved between them. Unmeasured (NaN) on fewer than
        # `MIN_LONE_DECODE_STEPS`: a backlogged run has a few, in its lulls, and their median can be
        # anything (9 such steps read 4.96 ms where its policy's other runs read 1.9).
        "lone_decode_steps": float(lone_decode.size),
        "lone_decode_step_ms": (
            float(np.median(lone_decode)) if lone_decode.size >= MIN_LONE_DECODE_STEPS else math.nan
        ),
        "preemptions": float(sum(s["preempted"] for s in steps)),
    }


def loop_lag(samples: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean, P99 and largest lag of the `vllm_model` loop, seconds."""
    lags = np.array([s["lag_s"] for s in samples])
    if not lags.size:
        return {}
    return {"mean": float(lags.mean()), "p99": float(np.percentile(lags, 99)), "max": float(lags.max())}


def request_stages(
    requests: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]], num_levels: int = 3
) -> dict[str, dict[str, float]]:
    """Per class: requests, and mean seconds of each stage to the first token (`STAGES`, and the
    whole `to_first_token_s`; the stages leave out the streaming of the first token back), and of
    vLLM's input stage the part spent waiting for the step in progress (`STEP_IN_PROGRESS`)."""
    waits = dict(zip(map(id, requests), step_in_progress_waits(requests, steps), strict=True))
    by_class: dict[str, dict[str, float]] = {}
    for level in range(num_levels):
        mine = [r for r in requests if r["level"] == level]
        label = RequestClass.for_level(level, num_levels).label
        if not mine:
            continue
        by_class[label] = {
            "requests": float(len(mine)),
            **{
                stage: _mean(np.array([r[stage] for r in mine], dtype=float))
                for stage in (*STAGES, "to_first_token_s")
            },
            STEP_IN_PROGRESS: _mean(np.array([waits[id(r)] for r in mine])),
        }
    return by_class


def step_in_progress_waits(requests: Sequence[dict[str, Any]], steps: Sequence[dict[str, Any]]) -> np.ndarray:
    """Per request, the seconds of its `vllm_input_s` spent waiting for the engine step in progress
    when it reached vLLM (`generate`): the engine core takes new requests into its queue only between
    steps, so one that comes during a step waits for the step's end. At most the whole stage; 0 where
    no step was running; NaN without engine times. A step's end is when `vllm_model` logged it, a few
    milliseconds late, so the wait is known to within those."""
    timed, ends = _timed(steps)
    return np.array([wait for _, wait in _steps_in_progress(requests, timed, ends)])


def _timed(steps: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], np.ndarray]:
    """The steps that carry their time, in order, and their ends (when `vllm_model` logged them)."""
    timed = sorted((s for s in steps if "step_ms" in s), key=lambda s: s["t"])
    return timed, np.array([s["t"] for s in timed])


def _steps_in_progress(
    requests: Sequence[dict[str, Any]], timed: Sequence[dict[str, Any]], ends: np.ndarray
) -> list[tuple[int, float]]:
    """Per request, the index in `timed` of the step running when it reached vLLM (-1 where none
    was), and its wait for that step's end (`step_in_progress_waits`)."""
    starts = ends - np.array([s["step_ms"] for s in timed]) / 1000
    found = []
    for request in requests:
        stage = request.get("vllm_input_s", math.nan)
        submitted = request.get("engine_queued", math.nan) - stage
        if not math.isfinite(submitted):
            found.append((-1, math.nan))
            continue
        i = int(np.searchsorted(ends, submitted))
        running = i < len(timed) and starts[i] <= submitted
        found.append((i, min(stage, float(ends[i]) - submitted)) if running else (-1, 0.0))
    return found


def engine_first_token_s(request: Mapping[str, Any]) -> float:
    """A request record's first-token time on the engine core's (monotonic) clock: its arrival in the
    engine core's queue plus its queue and prefill stages; NaN where the engine gave no timestamps."""
    return sum((request.get(key, math.nan) for key in ENGINE_TIMES), 0.0)


def first_token_steps(
    requests: Sequence[dict[str, Any]],
    steps: Sequence[dict[str, Any]],
    beside: Sequence[dict[str, Any]] | None = None,
    num_levels: int = 3,
) -> dict[str, dict[str, float]]:
    """Per class, the engine step that gave each request its first token, which its prefill stage
    (`prefill_s`) ends with: the mean of that step's seconds (`step_s`) and prompt tokens
    (`step_tokens`) beside the request's whole prompt (`own_tokens`) and the prompts of the other
    sand requests of `beside` (default: `requests`) whose first token came in the same step
    (`sand_beside_tokens`: all of their prompts there where sand is not split), the share of such
    steps that ran a vision encoder (`encoder`, the request's own or another's) and that ran more
    encoder inputs than the request's own (`other_encoder`: another request's encoder; NaN for
    records without `media_inputs`; exact where the prompt is not split, as sand's), the share where the
    request was the step's only prefill and ran no encoder (`alone`), and those steps' mean seconds
    (`alone_step_s`: the request's own prefill, nothing beside it but decodes).

    That step is the first one logged at or after the engine core's first-token time: `vllm_model`
    logs a step a few milliseconds after the engine core ends it. Requests without engine times
    are left out. Where a class's prefill stage is longer than its own work, this tells whose
    tokens or encoder shared its step."""
    timed, ends = _timed(steps)
    beside = requests if beside is None else beside
    # Each request's step, found once (by identity: the records are dicts); len(timed) for none.
    step_of: dict[int, int] = {}
    for request in (*requests, *beside):
        if id(request) not in step_of:
            step_of[id(request)] = _first_token_step(request, ends)
    sand_in_step: dict[int, list[dict[str, Any]]] = {}
    for request in beside:
        if request["level"] == 0:
            sand_in_step.setdefault(step_of[id(request)], []).append(request)
    rows: dict[int, list[list[float]]] = {}
    for r in requests:
        if (i := step_of[id(r)]) == len(timed):
            continue
        step = timed[i]
        encoder = step["encoder_inputs"] > 0
        alone = step["prefill_requests"] == 1 and not encoder
        sand_beside = sum(o["prompt_tokens"] for o in sand_in_step.get(i, []) if o is not r)
        own = (r["prefill_s"], step["step_ms"] / 1000, step["prefill_tokens"], r["prompt_tokens"])
        media = r.get("media_inputs")
        other_encoder = math.nan if media is None else float(step["encoder_inputs"] > media)
        rows.setdefault(r["level"], []).append([*own, sand_beside, encoder, other_encoder, alone])
    by_class: dict[str, dict[str, float]] = {}
    for level, values in sorted(rows.items()):
        table = np.array(values, dtype=float)
        alone = table[:, FIRST_TOKEN_STEP.index("alone")] > 0
        label = RequestClass.for_level(level, num_levels).label
        by_class[label] = {
            "requests": float(len(values)),
            **{key: float(column.mean()) for key, column in zip(FIRST_TOKEN_STEP, table.T, strict=True)},
            "alone_step_s": _mean(table[alone, FIRST_TOKEN_STEP.index("step_s")]),
        }
    return by_class


def _first_token_step(request: Mapping[str, Any], ends: np.ndarray) -> int:
    """The index of the step that gave `request` its first token: the first logged at or after the
    engine core's first-token time (`vllm_model` logs a step a few milliseconds after the engine core
    ends it); `len(ends)` where the request has no engine times or no step was logged after it."""
    first = engine_first_token_s(request)
    return int(np.searchsorted(ends, first)) if math.isfinite(first) else len(ends)


def first_token_tail(
    requests: Sequence[dict[str, Any]],
    steps: Sequence[dict[str, Any]],
    share: float = TAIL_SHARE,
    num_levels: int = 3,
) -> dict[str, dict[str, float]]:
    """Per class, what its slowest first tokens waited for: over the `share` of its requests with the
    longest time to the first token (at least one), the means of `FIRST_TOKEN_TAIL`. The first-token
    step ran another request's encoder where it ran more encoder inputs than the request's own media
    (as `first_token_steps`; NaN for records without `media_inputs`). Requests without engine times
    are left out.

    A class's mean stages (`request_stages`) say where its average request's time went; its P90 is
    set by the slowest tenth, which can wait for quite other steps: on the CPU stack, sand's slowest
    fifth waited for steps in progress of about half a second, half of them running a vision encoder
    beside a prompt chunk (docs/decisions.md, "Light steps")."""
    timed, ends = _timed(steps)
    rows: dict[int, list[list[float]]] = {}
    for request, (running, wait) in zip(requests, _steps_in_progress(requests, timed, ends), strict=True):
        first = _first_token_step(request, ends)
        if first == len(timed) or not math.isfinite(wait):
            continue
        own, before = timed[first], timed[running] if running >= 0 else None
        media = request.get("media_inputs")
        in_progress = (
            (0.0, 0.0) if before is None else (before["step_ms"] / 1000, before["encoder_inputs"] > 0)
        )
        others = math.nan if media is None else float(own["encoder_inputs"] > media)
        stages = (request["to_first_token_s"], wait, request["engine_queue_s"], request["prefill_s"])
        rows.setdefault(request["level"], []).append([*stages, *in_progress, own["step_ms"] / 1000, others])
    by_class: dict[str, dict[str, float]] = {}
    for level, values in sorted(rows.items()):
        table = np.array(values, dtype=float)
        slowest = table[np.argsort(-table[:, 0], kind="stable")[: max(1, math.ceil(share * len(table)))]]
        label = RequestClass.for_level(level, num_levels).label
        by_class[label] = {"requests": float(len(slowest))} | {
            key: _mean(column) for key, column in zip(FIRST_TOKEN_TAIL, slowest.T, strict=True)
        }
    return by_class


def token_parts(
    steps: Sequence[dict[str, Any]], requests: RequestRecords, origin_s: float
) -> dict[str, dict[str, float]]:
    """Per class, what the time per output token of `requests` (those with two tokens or more) was
    made of: milliseconds per token in the steps that ended between a request's first token and its
    last, by what they ran (`TOKEN_PARTS`; "between" is the rest: scheduling and streaming), and how
    many requests those steps decoded on average (the request among them). `origin_s`: the records'
    time 0 on the steps' (monotonic) clock.

    Every request decoding in a step waits for the whole step, so a step that runs a vision encoder
    or a long prompt chunk costs each of them its full length: the encoder and prefill parts are what
    the order of admission can move, the decode part what the batch size does."""
    timed = [s for s in steps if "step_ms" in s]
    ends = np.array([s["t"] for s in timed]) - origin_s
    step_ms = np.array([s["step_ms"] for s in timed])
    encoder = np.array([s["encoder_inputs"] > 0 for s in timed], dtype=bool)
    prefill = np.array([s["prefill_tokens"] > 0 for s in timed], dtype=bool) & ~encoder
    decoding = np.array([s["decode_requests"] for s in timed], dtype=float)
    tpot_ms = 1000 * requests.tpot
    rows: dict[int, list[list[float]]] = {}
    for i in np.flatnonzero(np.isfinite(tpot_ms)):  # finished, with two tokens or more
        during = (ends > requests.first_token_s[i]) & (ends <= requests.finish_s[i])
        tokens = requests.output_tokens[i] - 1
        kinds = [step_ms[during & encoder].sum(), step_ms[during & prefill].sum()]
        kinds.append(step_ms[during].sum() - sum(kinds))
        per_token = [k / tokens for k in kinds]
        beside = decoding[during].mean() if during.any() else math.nan
        rows.setdefault(int(requests.level[i]), []).append([*per_token, tpot_ms[i] - sum(per_token), beside])
    by_class: dict[str, dict[str, float]] = {}
    for level, values in sorted(rows.items()):
        table = np.array(values)
        label = RequestClass.for_level(level, requests.num_levels).label
        means = dict(zip((*TOKEN_PARTS, "decoding"), (_mean(column) for column in table.T), strict=True))
        by_class[label] = {
            "requests": float(len(values)),
            **means,
            "tpot_ms": sum(means[p] for p in TOKEN_PARTS),
        }
    return by_class


def summarize(
    path: Path, start: float, end: float, requests: RequestRecords | None = None, origin_s: float = 0.0
) -> dict[str, Any]:
    """The run log at `path` over [start, end] (monotonic seconds): engine, loop lag, stages, and,
    given the load client's `requests` of the window (time 0 at `origin_s`), their tokens' parts."""
    records = read_run_log(path)
    # Every step for the tokens' parts: the window's last requests decode past its end.
    steps = [r for r in records if r["kind"] == "step"]
    window_requests = in_window(records, "request", start, end)
    every_request = [r for r in records if r["kind"] == "request"]
    return {
        "run_log": str(path),
        "window": [start, end],
        "engine": engine_summary(in_window(steps, "step", start, end), end - start),
        "loop_lag_s": loop_lag(in_window(records, "lag", start, end)),
        "stages": request_stages(window_requests, steps),
        "first_token_steps": first_token_steps(window_requests, steps, every_request),
        "first_token_tail": first_token_tail(window_requests, steps),
        "token_parts": {} if requests is None else token_parts(steps, requests, origin_s),
    }


def engine_run(
    records: Sequence[dict[str, Any]], token_budget: int, light_budget: int, num_levels: int = 3
) -> EngineRun:
    """The run log's requests and steps as `service_bound` reads them. Requests by the engine core's
    timestamps (its queue, first scheduling, first token). A step's end is when `vllm_model` logged
    it, after the engine ended it; its start is taken as early as the log allows: its end less its
    time less the longest any first token took to reach `vllm_model`, so that the step in progress
    when a request arrived is never counted as serving it. The log records the KV cache's use as a
    share, not its free tokens: the bound then assumes the cache had room (`EngineRun`)."""
    requests = [r for r in records if r["kind"] == "request" and math.isfinite(engine_first_token_s(r))]
    queued = np.array([r["engine_queued"] for r in requests])
    scheduled = queued + np.array([r["engine_queue_s"] for r in requests])
    first_token = np.array([engine_first_token_s(r) for r in requests])
    logged = np.array([r["arrival"] + r["to_first_token_s"] for r in requests])
    delivery_s = float(np.max(logged - first_token, initial=0.0))
    steps = [r for r in records if r["kind"] == "step" and "step_ms" in r]
    end = np.array([r["t"] for r in steps])
    start = end - np.array([r["step_ms"] for r in steps]) / 1000 - delivery_s
    start = np.minimum.accumulate(start[::-1])[::-1]  # in time order, each as early as any after it
    return EngineRun(
        queued_s=queued,
        scheduled_s=scheduled,
        first_token_s=first_token,
        level=np.array([r["level"] for r in requests], dtype=int),
        prompt_tokens=np.array([r["prompt_tokens"] for r in requests], dtype=int),
        step_start_s=start,
        step_end_s=end,
        step_decodes=np.array([r["decode_tokens"] for r in steps], dtype=int),
        token_budget=token_budget,
        light_budget=light_budget,
        num_levels=num_levels,
    )


def pooled(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several runs' summaries as one: every number averaged over the runs that have it, weighted by
    their requests for the stages and the tokens' parts."""
    return {
        "engine": _average([s["engine"] for s in summaries]),
        "loop_lag_s": _average([s["loop_lag_s"] for s in summaries]),
        "stages": _by_class(
            [s["stages"] for s in summaries], (*STAGES, STEP_IN_PROGRESS, "to_first_token_s")
        ),
        "first_token_steps": _pooled_first_token_steps([s.get("first_token_steps", {}) for s in summaries]),
        "first_token_tail": _by_class([s.get("first_token_tail", {}) for s in summaries], FIRST_TOKEN_TAIL),
        "token_parts": _by_class(
            [s["token_parts"] for s in summaries], (*TOKEN_PARTS, "decoding", "tpot_ms")
        ),
    }


def _pooled_first_token_steps(
    runs: Sequence[Mapping[str, Mapping[str, float]]],
) -> dict[str, dict[str, float]]:
    """`first_token_steps` of several runs as one: weighted by each run's requests of the class, and
    the alone steps' seconds by the requests that had one."""
    pooled_runs = _by_class(runs, FIRST_TOKEN_STEP)
    for label, row in pooled_runs.items():
        parts = [run[label] for run in runs if label in run and math.isfinite(run[label]["alone_step_s"])]
        weights = [p["requests"] * p["alone"] for p in parts]
        known = sum(weights) > 0
        row["alone_step_s"] = (
            float(np.average([p["alone_step_s"] for p in parts], weights=weights)) if known else math.nan
        )
    return pooled_runs


def _by_class(
    runs: Sequence[Mapping[str, Mapping[str, float]]], keys: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per-class means of several runs as one, each run weighted by its requests of that class."""
    pooled: dict[str, dict[str, float]] = {}
    for label in {c for run in runs for c in run}:
        parts = [run[label] for run in runs if label in run]
        weights = np.array([p["requests"] for p in parts])
        pooled[label] = {"requests": float(weights.sum())} | {
            key: float(np.average([p[key] for p in parts], weights=weights)) for key in keys
        }
    return pooled


def _average(parts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    keys = {k for p in parts for k in p}
    return {k: float(np.nanmean([p.get(k, math.nan) for p in parts])) for k in sorted(keys)}


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan
