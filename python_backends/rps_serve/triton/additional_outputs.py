"""NVIDIA vllm_backend's additional outputs of a generate request, computed as that backend computes
them from vLLM's cumulative `RequestOutput`s: `finish_reason` (vLLM's, "None" until it finishes),
`cumulative_logprob` (NaN unless `sampling_parameters` asks for `logprobs`), `logprobs` (JSON: per
position, {token id: {"logprob", "rank", "decoded_token"}}; "null" unless asked for in
`sampling_parameters`), `num_input_tokens` and `num_output_tokens`. A streamed response's
`logprobs` and `num_output_tokens` cover what is new since the request's previous response; a
whole answer's cover all of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rps_serve.triton import protocol as p

# One position of vLLM's sample logprobs: token id -> Logprob(logprob, rank, decoded_token)
Position = Mapping[int, Any]


def logprobs_json(positions: Sequence[Position] | None) -> str:
    """vllm_backend's `logprobs` element for `positions`; "null" where vLLM computed none."""
    if positions is None:
        return "null"
    return json.dumps(
        [
            {
                token: {"logprob": entry.logprob, "rank": entry.rank, "decoded_token": entry.decoded_token}
                for token, entry in position.items()
            }
            for position in positions
        ]
    )


@dataclass
class AdditionalOutputs:
    """One request's additional outputs: those it asked for (`protocol.return_flag`), as of the latest
    engine output recorded, and how much of them its responses have carried."""

    asked: frozenset[str] = frozenset()
    finish_reason: str | None = None
    cumulative_logprob: float | None = None
    logprobs: Sequence[Position] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    _tokens_sent: int = 0
    _logprobs_sent: int = 0

    def record(self, output: Any) -> None:
        """Take the state of a vLLM `RequestOutput` (cumulative: its latest output holds all of it)."""
        completion = output.outputs[0]
        self.finish_reason = completion.finish_reason
        self.cumulative_logprob = completion.cumulative_logprob
        self.logprobs = completion.logprobs
        self.input_tokens = len(output.prompt_token_ids or ())
        self.output_tokens = len(completion.token_ids)

    def take(self) -> dict[str, Callable[[], np.ndarray | str]]:
        """The asked outputs of the next response, built only when called; what they report is sent
        from now on (the next response's `logprobs` and `num_output_tokens` start after it)."""
        finish_reason, input_tokens = self.finish_reason, self.input_tokens
        cumulative = math.nan if self.cumulative_logprob is None else self.cumulative_logprob
        new_tokens = self.output_tokens - self._tokens_sent
        self._tokens_sent = self.output_tokens
        new_logprobs: Sequence[Position] | None = None
        if self.logprobs is not None and p.LOGPROBS in self.asked:
            new_logprobs = self.logprobs[self._logprobs_sent :]
            self._logprobs_sent = len(self.logprobs)
        outputs: dict[str, Callable[[], np.ndarray | str]] = {
            p.FINISH_REASON: lambda: str(finish_reason),
            p.CUMULATIVE_LOGPROB: lambda: np.array([cumulative], dtype=np.float32),
            p.LOGPROBS: lambda: logprobs_json(new_logprobs),
            p.NUM_INPUT_TOKENS: lambda: np.array([input_tokens], dtype=np.uint32),
            p.NUM_OUTPUT_TOKENS: lambda: np.array([new_tokens], dtype=np.uint32),
        }
        return {name: value for name, value in outputs.items() if name in self.asked}
