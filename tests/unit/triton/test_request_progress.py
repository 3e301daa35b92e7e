"""`RequestProgress`: one request's outputs as vLLM's engine hands them over (its own `RequestOutput`),
what each streamed response carries, and its stages to the first token."""

from __future__ import annotations

import math

from vllm.outputs import CompletionOutput, RequestOutput
from vllm.v1.metrics.stats import RequestStateStats

from rps_serve.triton.request_progress import RequestProgress


def _output(text: str, tokens: list[int], stats: RequestStateStats | None = None) -> RequestOutput:
    completion = CompletionOutput(0, text, tokens, None, None)
    return RequestOutput("r", "prompt", [1, 2], None, [completion], finished=False, metrics=stats)


def test_the_first_token_is_recorded_once_and_each_response_carries_only_new_text() -> None:
    progress = RequestProgress()
    assert not progress.record(_output("", []))  # an output before any token (a prefill chunk)
    assert progress.record(_output("Hel", [7]))
    assert progress.unsent() == "Hel"
    assert not progress.record(_output("Hello", [7, 8], RequestStateStats(num_preemptions=1)))
    assert progress.unsent() == "lo" and progress.unsent() == ""
    assert progress.preemptions == 1


def test_the_stages_split_the_time_to_the_first_token() -> None:
    progress = RequestProgress(front_end_queue_s=0.1, front_end_work_s=0.2, submitted=10.0)
    stats = RequestStateStats(queued_ts=10.5, scheduled_ts=11.0, first_token_ts=12.5)
    stages = progress.stages(_output("a", [1], stats), arrival=9.0)
    assert stages["vllm_input_s"] == 0.5
    assert stages["engine_queue_s"] == 0.5
    assert stages["prefill_s"] == 1.5
    assert stages["front_end_queue_s"] == 0.1 and stages["arrival"] == 9.0
    assert stages["engine_queued"] == 10.5 and stages["prompt_tokens"] == 2  # the prompt's [1, 2]
    # An engine that reports no timestamps leaves its stages unknown, not zero.
    assert math.isnan(progress.stages(_output("a", [1], RequestStateStats()), arrival=9.0)["prefill_s"])
