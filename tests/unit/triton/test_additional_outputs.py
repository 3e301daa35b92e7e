"""vllm_backend's additional outputs, computed from vLLM's own output types as that backend does."""

from __future__ import annotations

import json
import math

import numpy as np
from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput, RequestOutput

from rps_serve.triton import protocol as p
from rps_serve.triton.additional_outputs import AdditionalOutputs, logprobs_json

PROMPT_TOKENS = [1, 2, 3, 4, 5]


def _position(token: int) -> dict[int, Logprob]:
    return {token: Logprob(-0.5, rank=1, decoded_token=f"t{token}"), 99: Logprob(-2.0, 2, "x")}


def _output(tokens: list[int], finish_reason: str | None = None, logprobs: bool = False) -> RequestOutput:
    """A cumulative RequestOutput after `tokens`; with `logprobs` as sampling_parameters' `logprobs: 1`."""
    completion = CompletionOutput(
        index=0,
        text="".join(f"t{t}" for t in tokens),
        token_ids=tokens,
        cumulative_logprob=-0.5 * len(tokens) if logprobs else None,
        logprobs=[_position(t) for t in tokens] if logprobs else None,
        finish_reason=finish_reason,
    )
    return RequestOutput("r", "prompt", PROMPT_TOKENS, None, [completion], finish_reason is not None)


def _values(outputs: AdditionalOutputs) -> dict[str, np.ndarray | str]:
    return {name: build() for name, build in outputs.take().items()}


def test_only_the_asked_outputs_are_built() -> None:
    outputs = AdditionalOutputs(frozenset({p.FINISH_REASON, p.NUM_OUTPUT_TOKENS}))
    outputs.record(_output([7, 8], "length"))
    assert _values(outputs) == {p.FINISH_REASON: "length", p.NUM_OUTPUT_TOKENS: np.array([2])}
    assert AdditionalOutputs().take() == {}


def test_a_whole_answer_reports_everything() -> None:
    outputs = AdditionalOutputs(frozenset(p.ADDITIONAL_OUTPUTS))
    for done in range(1, 4):  # the engine's outputs before the single response
        outputs.record(_output([7, 8, 9][:done], "stop" if done == 3 else None, logprobs=True))
    values = _values(outputs)
    assert values[p.FINISH_REASON] == "stop"
    assert values[p.NUM_INPUT_TOKENS].tolist() == [5] and values[p.NUM_INPUT_TOKENS].dtype == np.uint32
    assert values[p.NUM_OUTPUT_TOKENS].tolist() == [3] and values[p.NUM_OUTPUT_TOKENS].dtype == np.uint32
    assert values[p.CUMULATIVE_LOGPROB].tolist() == [-1.5]
    assert values[p.CUMULATIVE_LOGPROB].dtype == np.float32
    positions = json.loads(str(values[p.LOGPROBS]))
    assert [list(position) for position in positions] == [["7", "99"], ["8", "99"], ["9", "99"]]
    assert positions[0]["7"] == {"logprob": -0.5, "rank": 1, "decoded_token": "t7"}


def test_streamed_responses_carry_what_is_new() -> None:
    """As vllm_backend: each response's num_output_tokens and logprobs start after the previous one's;
    finish_reason reads "None" until the request finishes; the other outputs are the totals so far."""
    outputs = AdditionalOutputs(frozenset(p.ADDITIONAL_OUTPUTS))
    responses = []
    for tokens, reason in (([7], None), ([7, 8, 9], None), ([7, 8, 9, 10], "length")):
        outputs.record(_output(tokens, reason, logprobs=True))
        responses.append(_values(outputs))
    assert [r[p.FINISH_REASON] for r in responses] == ["None", "None", "length"]
    assert [r[p.NUM_OUTPUT_TOKENS].tolist() for r in responses] == [[1], [2], [1]]
    assert [r[p.NUM_INPUT_TOKENS].tolist() for r in responses] == [[5]] * 3
    assert [r[p.CUMULATIVE_LOGPROB].tolist() for r in responses] == [[-0.5], [-1.5], [-2.0]]
    new = [[next(iter(position)) for position in json.loads(str(r[p.LOGPROBS]))] for r in responses]
    assert new == [["7"], ["8", "9"], ["10"]]


def test_without_sampling_logprobs_the_logprob_outputs_are_empty_as_in_vllm_backend() -> None:
    outputs = AdditionalOutputs(frozenset({p.CUMULATIVE_LOGPROB, p.LOGPROBS}))
    outputs.record(_output([7], "stop"))
    values = _values(outputs)
    assert math.isnan(values[p.CUMULATIVE_LOGPROB][0])
    assert values[p.LOGPROBS] == "null"


def test_logprobs_json_of_no_positions() -> None:
    assert logprobs_json(None) == "null"
    assert logprobs_json([]) == "[]"
