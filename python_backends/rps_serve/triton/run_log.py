"""What a run did inside `vllm_model`, for finding where its time went: one JSON line per engine step
(vLLM's iteration details: prompt and decode tokens scheduled, encoder inputs run, the step's time,
running and waiting requests, KV-cache use, preemptions) and one per sample of the lag of the asyncio
loop that streams every response. Written only when `RPS_RUN_LOG` names a file; every policy records
the same things the same way (a stat logger on the `AsyncLLM`, not the scheduler), so the baselines'
steps read like the plug-in's.

Each line is {"kind": "step" | "lag" | "request", "t": monotonic seconds, ...}: `t` is `time.monotonic()`, one
clock for every process of the machine, so a load client can cut the steps of its own window out.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import IO, Any

from rps_serve.triton.settings import RUN_LOG_ENV

LAG_PERIOD_S = 0.1
MODEL_PLACEHOLDER = "{model}"
# The engine argument that makes vLLM's engine core attach a step's details to its scheduler stats.
ITERATION_DETAILS_ARG = "enable_logging_iteration_details"


class RunLog:
    """An append-only JSON-lines file; used from the `vllm_model` loop's thread only."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("a", buffering=1 << 16)

    @classmethod
    def from_environment(cls, model: str) -> RunLog | None:
        """The log `RPS_RUN_LOG` names, if set; `{model}` in it stands for the engine model's name (a
        server with an engine per policy writes a log per engine)."""
        path = os.environ.get(RUN_LOG_ENV)
        return cls(Path(path.replace(MODEL_PLACEHOLDER, model))) if path else None

    def write(self, kind: str, **fields: Any) -> None:
        self._file.write(json.dumps({"kind": kind, "t": time.monotonic(), **fields}) + "\n")

    def flush(self) -> None:
        self._file.flush()

    def step(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        """One engine step, from the stats vLLM hands its stat loggers (`triton.engine_stats`)."""
        step = scheduler_stats.iteration_details
        fields: dict[str, Any] = {
            "running": scheduler_stats.num_running_reqs,
            "waiting": scheduler_stats.num_waiting_reqs + scheduler_stats.num_skipped_waiting_reqs,
            "kv": round(float(scheduler_stats.kv_cache_usage), 4),
            "preempted": 0 if iteration_stats is None else iteration_stats.num_preempted_reqs,
        }
        if step is not None and not step.is_dummy:
            fields.update(
                step_ms=round(step.elapsed_ms, 3),
                prefill_requests=step.num_ctx_requests,
                prefill_tokens=step.num_ctx_tokens,
                decode_requests=step.num_generation_requests,
                decode_tokens=step.num_generation_tokens,
                encoder_inputs=step.num_encoder_inputs,
            )
        self.write("step", **fields)

    def close(self) -> None:
        self._file.close()


async def watch_loop_lag(log: RunLog, period_s: float = LAG_PERIOD_S) -> None:
    """Forever: sleep `period_s` and record how much later than asked the loop woke up, which is how
    long any response the loop had to send waited behind other work on it (or behind the GIL); then
    flush the log, so that a reader is never more than `period_s` behind the server."""
    while True:
        asked = time.monotonic()
        await asyncio.sleep(period_s)
        log.write("lag", lag_s=round(time.monotonic() - asked - period_s, 5))
        log.flush()
