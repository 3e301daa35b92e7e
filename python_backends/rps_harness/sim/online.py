"""The online refit in the simulator: a trace classed request by request, at arrival, by a cost model
that learns the simulated device's prefill costs as they are observed (`cost.online`), from whatever
fit it starts with; then the same trace simulated under those classes.

How the simulated server observes: a request's prefill cost is the device's own isolated engine time
for it (vision encoding included), times a contention factor drawn from a log-normal distribution
(`contention`, its sigma; a served step is rarely the isolated one) and, for a share `outliers` of
requests, times `outlier_factor` (a step that stalled); it is observed once its prefill could have
ended, its arrival plus that time (queueing is left out: it delays an observation by at most a few
seconds, against the feed's `interval_s` of 10). Every `interval_s` of trace time the feed hands the
records observed so far to the model and updates it, as `vllm_model`'s does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rps_harness.sim.simulator import Deployment
from rps_harness.workload.trace import Trace
from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel, agreement
from rps_serve.cost.online import OnlineCostModel
from rps_serve.profiles.records import ProfileRecord
from rps_serve.requests import Modality, RequestFeatures

PROBE_TOKENS = (20, 100, 300, 600, 1000, 1500, 2000, 3000, 4000, 6000, 8000)
PROBE_TEXT_TOKENS = 20  # a media probe's text around its placeholders


def probe_grid() -> list[RequestFeatures]:
    """Requests of every modality at prompt lengths from 20 to 8,000 tokens: what a fit is judged on."""
    return [
        RequestFeatures(m, t, 0 if m is Modality.TEXT else t - PROBE_TEXT_TOKENS)
        for m in Modality
        for t in PROBE_TOKENS
    ]


@dataclass(frozen=True)
class Observation:
    """How the simulated server measures prefill costs (see the module docstring)."""

    contention: float = 0.2
    outliers: float = 0.01
    outlier_factor: float = 5.0
    seed: int = 0


@dataclass(frozen=True)
class OnlineUpdate:
    """One update of the fit: when, after how many arrivals, and how the probes were classed then."""

    time_s: float
    arrived: int
    agreement: float  # share of the probes classed as the true fit classes them


@dataclass(frozen=True)
class OnlineReplay:
    """A trace classed at arrival by the online refit: the classes, and how the fit agreed with the truth."""

    levels: np.ndarray  # the class each request got at its arrival
    start_agreement: float  # the probes' agreement before any update
    updates: list[OnlineUpdate]

    @property
    def final_agreement(self) -> float:
        """The probes' agreement after the last update."""
        return self.updates[-1].agreement if self.updates else self.start_agreement


def arrivals_until_agreed(
    levels: np.ndarray, true_levels: np.ndarray, agreement: float = 0.9, window: int = 200
) -> int | None:
    """The first request from which on every `window` consecutive requests get the class `true_levels`
    gives them at a share of `agreement` or more (0 if they do from the start; None if the last
    `window` do not): the arrivals the classes took to agree."""
    agreed = (levels == true_levels).astype(np.int64)
    if len(agreed) < window:
        raise ValueError(f"need at least {window} requests, got {len(agreed)}")
    # Counted in whole requests: a share summed in floating point sits either side of `agreement`
    # at the edge, by the summation order of the machine's numpy.
    rolling = np.convolve(agreed, np.ones(window, dtype=np.int64), mode="valid")  # [i]: i .. i+window-1
    below = np.flatnonzero(rolling < math.ceil(round(agreement * window, 9)))
    if below.size == 0:
        return 0
    settled = int(below[-1]) + 1
    return None if settled >= len(rolling) else settled


def trace_features(trace: Trace) -> np.ndarray:
    """The cost model's float32 [n, 3] features of every request of `trace`."""
    features = np.empty((len(trace), cols.NUM_FEATURES), dtype=np.float32)
    features[:, cols.MODALITY] = trace.modality
    features[:, cols.PROMPT_TOKENS] = trace.prompt_tokens
    features[:, cols.MODALITY_TOKENS] = trace.modality_tokens
    return features


def observed_costs(trace: Trace, deployment: Deployment, observation: Observation) -> np.ndarray:
    """Each request's prefill seconds as the simulated server measures them."""
    isolated = deployment.isolated_engine_s(trace)
    rng = np.random.default_rng(observation.seed)
    factor = rng.lognormal(0.0, observation.contention, len(trace))
    factor[rng.random(len(trace)) < observation.outliers] *= observation.outlier_factor
    seconds: np.ndarray = isolated * factor
    return seconds


def online_levels(
    trace: Trace,
    deployment: Deployment,
    model: OnlineCostModel,
    truth: CostModel,
    probes: list[RequestFeatures],
    observation: Observation = Observation(),
) -> OnlineReplay:
    """Class every request of `trace` at its arrival with `model`'s fit then, feeding it the observed
    costs every `interval_s`; after each update, the probes' agreement with `truth`."""
    seconds = observed_costs(trace, deployment, observation)
    observed_at = trace.arrival_s + seconds
    order = np.argsort(observed_at, kind="stable")
    requests = cols.requests_of(trace_features(trace))
    levels = np.empty(len(trace), dtype=np.int64)
    start = agreement(model, truth, probes)
    updates: list[OnlineUpdate] = []
    fed = 0  # observations handed to the model, in the order they were made
    next_update_s = trace.arrival_s[0] + model.options.interval_s if len(trace) else 0.0
    for i, arrival in enumerate(trace.arrival_s):
        while arrival >= next_update_s:
            ready = np.searchsorted(observed_at[order], next_update_s, side="right")
            model.observe(
                _record(requests[j], seconds[j], int(trace.output_tokens[j])) for j in order[fed:ready]
            )
            fed = int(ready)
            if model.update() is not None:
                updates.append(OnlineUpdate(float(next_update_s), i, agreement(model, truth, probes)))
            next_update_s += model.options.interval_s
        levels[i] = model.assess([requests[i]])[0].level
    return OnlineReplay(levels, start, updates)


def _record(request: RequestFeatures, seconds: float, output_tokens: int) -> ProfileRecord:
    return ProfileRecord(
        modality=request.modality,
        prompt_tokens=request.prompt_tokens,
        modality_tokens=request.modality_tokens,
        encoder_s=0.0,
        prefill_s=float(seconds),
        output_tokens=output_tokens,
        under_load=True,
    )
