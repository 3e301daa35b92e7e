"""What one request of `vllm_model` has produced so far, and the responses and stage record made of it.

`vllm_model` keeps one `RequestProgress` per request from admission to its final response: the text
the engine has generated (and how much of it has been streamed), vLLM's additional outputs, where the
request spent its time before the engine, and whether its client cancelled it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rps_serve.triton import protocol as p
from rps_serve.triton.additional_outputs import AdditionalOutputs
from rps_serve.triton.backend import requested_outputs
from rps_serve.triton.classes import ClassInfo


@dataclass
class RequestProgress:
    """One request's outputs so far (for metrics and its responses)."""

    text: str = ""
    sent: int = 0  # characters of `text` already streamed
    first_token: bool = False
    preemptions: int = 0
    cancelled: bool = False
    outputs: frozenset[str] = frozenset()  # the outputs its responses carry (`protocol.outputs_to_send`)
    additional: AdditionalOutputs = field(default_factory=AdditionalOutputs)
    # Where the request spent its time before the engine (monotonic seconds), for the run log.
    front_end_queue_s: float = 0.0
    front_end_work_s: float = 0.0
    submitted: float = 0.0  # handed to `generate`

    def record(self, output: Any) -> bool:
        """Take in one of the engine's `RequestOutput`s; True where it carries the first token."""
        completion = output.outputs[0]
        first = bool(completion.token_ids) and not self.first_token
        self.first_token = self.first_token or first
        self.text = completion.text
        self.additional.record(output)
        if output.metrics is not None:
            self.preemptions = output.metrics.num_preemptions
        return first

    def unsent(self) -> str:
        """The text generated since the last call (what the next streamed response carries)."""
        delta = self.text[self.sent :]
        self.sent = len(self.text)
        return delta

    def stages(self, output: Any, arrival: float) -> dict[str, float]:
        """The request's way to its first token, stage by stage, for every front end alike, from the
        output that carries it: vLLM's own input processing (from `generate` to the engine core's
        queue) counts as front-end work, not as the engine's. The engine core's timestamps are
        monotonic seconds, the clock used here; `engine_queued` is when the request reached the
        engine core's queue, and `prompt_tokens` what its prefill computes (`service_bound`)."""
        stats = output.metrics
        queued = getattr(stats, "queued_ts", 0.0) or math.nan
        scheduled = getattr(stats, "scheduled_ts", 0.0) or math.nan
        first = getattr(stats, "first_token_ts", 0.0) or math.nan
        return {
            "arrival": arrival,
            "engine_queued": queued,
            "prompt_tokens": len(output.prompt_token_ids or ()),
            "front_end_queue_s": self.front_end_queue_s,
            "front_end_work_s": self.front_end_work_s,
            "vllm_input_s": queued - self.submitted,
            "engine_queue_s": scheduled - queued,
            "prefill_s": first - scheduled,
            "to_first_token_s": time.monotonic() - arrival,
        }

    def response(self, pb_utils: Any, text: str, info: ClassInfo) -> Any:
        """A response carrying `text` and, of the other outputs, those the request asked for."""
        outputs: dict[str, Callable[[], np.ndarray | str]] = {
            p.TEXT_OUTPUT: lambda: text,
            **self.additional.take(),
            p.RPS_CLASS: lambda: info.request_class.label,
            p.EST_PREFILL_S: lambda: np.array([info.est_prefill_s], dtype=np.float32),
        }
        return pb_utils.InferenceResponse(output_tensors=requested_outputs(pb_utils, self.outputs, outputs))
