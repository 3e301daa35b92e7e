"""Observed prefill costs: what each request's prefill took on the engine while it served, from the
engine's own step times, as profile records marked `under_load`.

The Impact Estimator is fitted offline on isolated runs (RPS-Serve, arXiv 2603.26498, trains it once
per model); these records are the same measurement taken from served traffic, so that the fit can be
checked and refitted against the model, device and load it actually runs on (`rps-serve train
--profile-data` takes them as they are).

Attribution: a step's time is split over the tokens it computed, prompt and decode tokens alike, an
equal share each; a request's observed admission cost is the sum of the shares of its prompt tokens
over the steps that computed them, vision encoding included (the encoder runs inside the step that
computes the request's placeholder tokens, so its time is in that step's). To first order a step's
cost grows with the tokens it computes (its matrix products do), so equal shares charge a request for
its own work; what they cannot separate lands on every token of the step alike: attention's growth
with context, an encoder's time beyond its request's tokens, the contention of a loaded step. A
request whose computed tokens are thrown away (preempted, aborted) starts over or is forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rps_serve.profiles.records import ProfileRecord
from rps_serve.requests import RequestFeatures


@dataclass(frozen=True)
class StepWork:
    """What one engine step computed: per request, the prompt tokens of its prefill chunk; the decode
    tokens of every other request in the step; the requests whose prefill the step completes."""

    prefill_tokens: Mapping[str, int]
    decode_tokens: int = 0
    completed: Mapping[str, RequestFeatures] = field(default_factory=dict)


class PrefillCostObserver:
    """Accumulates each request's share of its prefill steps; a record when its prefill completes."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}

    @property
    def open_requests(self) -> int:
        """Requests part-way through their prefill."""
        return len(self._seconds)

    def observe(self, work: StepWork, seconds: float) -> list[ProfileRecord]:
        """Charge one step of `seconds` to its tokens; the records of the prefills it completed."""
        tokens = sum(work.prefill_tokens.values()) + work.decode_tokens
        per_token = seconds / tokens if tokens else 0.0
        for request_id, prefill in work.prefill_tokens.items():
            self._seconds[request_id] = self._seconds.get(request_id, 0.0) + prefill * per_token
        return [
            ProfileRecord(
                modality=features.modality,
                prompt_tokens=features.prompt_tokens,
                modality_tokens=features.modality_tokens,
                encoder_s=0.0,  # inside the step's time, not apart from it
                prefill_s=self._seconds.pop(request_id, 0.0),
                output_tokens=0,
                under_load=True,
            )
            for request_id, features in work.completed.items()
        ]

    def forget(self, request_id: str) -> None:
        """The request's computed tokens are gone (preempted, aborted): its prefill, if it comes
        again, is charged from the start."""
        self._seconds.pop(request_id, None)
