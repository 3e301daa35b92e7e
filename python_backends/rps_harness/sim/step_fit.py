"""A step-time model fitted on the engine's own steps under load, beside the simulator's isolated one.

The server's run log (`triton.run_log`) holds one record per engine step: its time (`step_ms`, the
engine core's forward pass, vLLM's iteration details), the prompt-chunk tokens and requests it
scheduled, its decoding requests, the vision-encoder inputs it ran, the running requests and the KV
cache's use after scheduling (`kv`, a share of `kv_capacity_tokens`). A step's seconds are fitted as
a non-negative sum of the terms of `TERMS` (non-negative least squares: no term can make a step
cheaper), on the steps of some runs, and checked on the steps of others.

Two things are not in a step's record and are stood in for (see `TERMS`): the KV tokens a step
attends to (the cache's use, all running requests' tokens, this step's chunks included) and the
context a prefill chunk attends to (its tokens times the cache's use before the chunk; exact for a
step that prefills one request and decodes none, an overcount when others hold KV too).
`simulator_step_s` gives what `sim.timing.TimingModel` charges for the same steps, to tell which
term the simulator's optimism comes from.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from rps_harness.loadtest.run_analysis import read_run_log
from rps_harness.sim.measured import LoadedSteps
from rps_harness.sim.timing import TimingModel
from rps_serve.requests import Modality

# The CPU test stack's KV cache (the engine's log: "CPU KV cache size: 262,144 tokens").
CPU_KV_CAPACITY_TOKENS = 262_144

# (name, what one unit of it is); a coefficient is seconds per unit.
TERMS: tuple[tuple[str, str], ...] = (
    ("step", "every step: scheduling, sampling, the launch of the forward pass"),
    ("prefill_step", "a step that has any prompt chunk, once"),
    ("prefill_request", "each request with a prompt chunk in the step"),
    ("prefill_token", "each prompt-chunk token"),
    ("decode_request", "each decoding request (its one token through the model)"),
    ("kv_token", "each token held in the KV cache (what decodes and chunks attend to)"),
    ("chunk_context", "each prompt-chunk token times each token cached before the chunk"),
    ("encoder_input", "each image or video the vision encoder runs in the step"),
    ("encoder_token", "each prompt-chunk token of a step that runs the vision encoder"),
)
TERM_NAMES: tuple[str, ...] = tuple(name for name, _ in TERMS)
# The fit's terms by default: `chunk_context`'s stand-in counts the decodes' KV as a chunk's context, so
# a fit with it does not carry over to a run whose decodes hold more KV (it over-predicted the chunks
# of the overload runs by 30% where the fit without it was within 8%).
DEFAULT_TERMS: tuple[str, ...] = tuple(name for name in TERM_NAMES if name != "chunk_context")


@dataclass(frozen=True)
class Steps:
    """Engine steps as columns (one row a step); `run` names the log each came from."""

    step_s: np.ndarray
    # From the previous step's end to this step's start while the engine stayed busy, else NaN.
    gap_s: np.ndarray
    prefill_tokens: np.ndarray
    prefill_requests: np.ndarray
    decode_requests: np.ndarray
    encoder_inputs: np.ndarray
    kv_tokens: np.ndarray
    running: np.ndarray
    run: np.ndarray

    def __len__(self) -> int:
        return len(self.step_s)

    def subset(self, mask: np.ndarray) -> Steps:
        return Steps(**{name: getattr(self, name)[mask] for name in self.__dataclass_fields__})

    @classmethod
    def concat(cls, parts: Sequence[Steps]) -> Steps:
        return cls(
            **{name: np.concatenate([getattr(p, name) for p in parts]) for name in cls.__dataclass_fields__}
        )


def steps_from_records(
    records: Iterable[dict[str, object]], run: str, kv_capacity_tokens: int = CPU_KV_CAPACITY_TOKENS
) -> Steps:
    """The timed steps of a run log's records (`kind` "step" with `step_ms`; others are skipped)."""
    rows = [r for r in records if r.get("kind") == "step"]
    timed = [i for i, r in enumerate(rows) if "step_ms" in r]

    def column(key: str) -> np.ndarray:
        return np.array([float(rows[i][key]) for i in timed], dtype=np.float64)  # type: ignore[arg-type]

    step_s = column("step_ms") / 1000
    end = np.array([float(r["t"]) for r in rows])  # type: ignore[arg-type]
    busy_before = np.array([i > 0 and float(rows[i - 1]["running"]) > 0 for i in timed])  # type: ignore[arg-type]
    previous_end = np.array([end[i - 1] if i > 0 else np.nan for i in timed])
    gap = np.where(busy_before, end[timed] - previous_end - step_s, np.nan)
    return Steps(
        step_s=step_s,
        gap_s=gap,
        prefill_tokens=column("prefill_tokens"),
        prefill_requests=column("prefill_requests"),
        decode_requests=column("decode_requests"),
        encoder_inputs=column("encoder_inputs"),
        kv_tokens=column("kv") * kv_capacity_tokens,
        running=column("running"),
        run=np.full(len(timed), run),
    )


def read_steps(path: Path, kv_capacity_tokens: int = CPU_KV_CAPACITY_TOKENS) -> Steps:
    """A run log's timed steps; an unfinished last line (a server killed mid-write) is skipped."""
    return steps_from_records(read_run_log(path), path.stem, kv_capacity_tokens)


def design(steps: Steps, terms: Sequence[str] = TERM_NAMES) -> np.ndarray:
    """One column per term of `terms` (units of `TERMS`), one row per step."""
    context_before = np.maximum(steps.kv_tokens - steps.prefill_tokens, 0.0)
    columns = {
        "step": np.ones(len(steps)),
        "prefill_step": (steps.prefill_tokens > 0).astype(np.float64),
        "prefill_request": steps.prefill_requests,
        "prefill_token": steps.prefill_tokens,
        "decode_request": steps.decode_requests,
        "kv_token": steps.kv_tokens,
        "chunk_context": steps.prefill_tokens * context_before,
        "encoder_input": steps.encoder_inputs,
        "encoder_token": np.where(steps.encoder_inputs > 0, steps.prefill_tokens, 0.0),
    }
    unknown = set(terms) - columns.keys()
    if unknown:
        raise ValueError(f"unknown step terms {sorted(unknown)}; known: {list(columns)}")
    return np.column_stack([columns[t] for t in terms])


@dataclass(frozen=True)
class StepModel:
    """Seconds of a step: the sum over `terms` of coefficient times the step's units of it."""

    terms: tuple[str, ...]
    coefficients: np.ndarray

    def predict(self, steps: Steps) -> np.ndarray:
        return design(steps, self.terms) @ self.coefficients

    def named(self) -> dict[str, float]:
        return {t: float(c) for t, c in zip(self.terms, self.coefficients, strict=True)}


def fit_steps(steps: Steps, terms: Sequence[str] = DEFAULT_TERMS, relative: bool = False) -> StepModel:
    """Non-negative least squares of step seconds on `terms`. Each column is scaled to unit norm first,
    so that terms whose units differ by orders of magnitude (a step, a token times a token) are solved
    alike. `relative`: weigh each step by 1/its seconds (fits relative rather than absolute errors)."""
    if len(steps) < len(terms):
        raise ValueError(f"{len(steps)} steps cannot fix {len(terms)} terms")
    x = design(steps, terms)
    y = steps.step_s.copy()
    if relative:
        weight = 1 / np.maximum(y, 1e-6)
        x, y = x * weight[:, None], y * weight
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    solution, _ = nnls(x / scale, y, maxiter=50 * len(terms))
    return StepModel(tuple(terms), solution / scale)


@dataclass(frozen=True)
class Score:
    """How well predicted step seconds match measured ones."""

    steps: int
    r2: float
    median_abs_relative: float
    measured_total_s: float
    predicted_total_s: float

    @property
    def total_ratio(self) -> float:
        return self.predicted_total_s / self.measured_total_s

    def as_dict(self) -> dict[str, float]:
        return {**self.__dict__, "total_ratio": self.total_ratio}


def score(measured_s: np.ndarray, predicted_s: np.ndarray) -> Score:
    residual = measured_s - predicted_s
    spread = float(((measured_s - measured_s.mean()) ** 2).sum())
    return Score(
        steps=len(measured_s),
        r2=1 - float((residual**2).sum()) / spread if spread > 0 else float("nan"),
        median_abs_relative=float(np.median(np.abs(residual) / measured_s)),
        measured_total_s=float(measured_s.sum()),
        predicted_total_s=float(predicted_s.sum()),
    )


def simulator_step_s(
    timing: TimingModel, steps: Steps, max_num_batched_tokens: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """What `timing` charges for each step, and that split by part: "fixed" (the step's fixed part,
    `prefill_step_s` on a step with a chunk), "token" (`token_s` per chunk token and decode), "kv"
    (`kv_token_s` per KV token held, the records' stand-in for the decodes' context) and "encoder".

    The records do not say which modality an encoder input was nor its vision tokens: each input is
    charged the video line at the step's chunk tokens shared among its inputs when the chunk fills
    the token budget (a video's first chunk), else the image line; a video longer than one chunk is
    so charged less than the simulator would charge it (its whole encoder runs in that step)."""
    fixed = np.where(
        steps.prefill_tokens > 0, max(timing.prefill_step_s, timing.decode_step_s), timing.decode_step_s
    )
    fixed = fixed + timing.step_overhead_s
    token = timing.token_s * steps.prefill_tokens + timing.decode_request_s * steps.decode_requests
    kv = timing.kv_token_s * steps.kv_tokens
    inputs = np.maximum(steps.encoder_inputs, 1)
    video = steps.prefill_tokens >= max_num_batched_tokens
    modality = np.where(video, Modality.VIDEO.index, Modality.IMAGE.index)
    per_input = timing.encoder_s(modality, steps.prefill_tokens / inputs)
    encoder = np.where(steps.encoder_inputs > 0, per_input * steps.encoder_inputs, 0.0)
    parts = {"fixed": fixed, "token": token, "kv": kv, "encoder": encoder}
    return fixed + token + kv + encoder, parts


def loaded_steps(steps: Steps) -> LoadedSteps:
    """The simulator's step terms fitted on loaded steps, in two stages so that the busy steps' few
    long chunks do not bend the decode terms: every step's fixed cost and the cost per KV token read
    on the decode-only steps; then the cost per prompt-chunk token on the steps with a chunk and no
    vision encoder (the simulator charges the encoder from the isolated lines), less those two; the
    median time between one busy step and the next (the engine's own work outside its steps) is added
    to every step. A decoding request costs nothing beyond its KV reads (fitted ~0: `fit_steps`)."""
    plain = steps.subset(steps.encoder_inputs == 0)
    decode = fit_steps(plain.subset(plain.prefill_tokens == 0), ("step", "kv_token")).named()
    chunks = plain.subset(plain.prefill_tokens > 0)
    rest = chunks.step_s - decode["step"] - decode["kv_token"] * chunks.kv_tokens
    tokens = chunks.prefill_tokens
    chunk_token_s = max(float(tokens @ rest / (tokens @ tokens)), 0.0) if tokens.size else 0.0
    gaps = plain.gap_s[np.isfinite(plain.gap_s)]
    return LoadedSteps(
        step_s=decode["step"] + (float(np.median(gaps)) if gaps.size else 0.0),
        chunk_token_s=chunk_token_s,
        decode_request_s=0.0,
        kv_token_s=decode["kv_token"],
    )
