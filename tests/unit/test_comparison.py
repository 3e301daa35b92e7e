"""Paired ratios of policies over seeds, on synthetic runs whose true ratios are known by
construction, and the interval's coverage on synthetic experiments with per-run effects."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import norm

from rps_harness.comparison import (
    HEADLINE_METRICS,
    Metric,
    Ratio,
    log_t_interval,
    paired_ratio,
    ratio_rows,
    steady,
)
from rps_harness.metrics import STEADY_STATE_TRIM, RequestRecords
from rps_serve.requests import Modality

METRICS = {m.name: m for m in HEADLINE_METRICS}
TEXT_P90 = METRICS["text P90 TTFT"]
TEXT_MEAN = METRICS["text mean TTFT"]
TPOT_MEAN = METRICS["TPOT mean"]


def _run(ttft: np.ndarray, modality: np.ndarray, per_token: np.ndarray | None = None) -> RequestRecords:
    """Requests arriving one per second with the given TTFTs, 11 output tokens each, decoding at
    `per_token` seconds per token after the first (by default 0.01 to 0.03, varied); every other text
    a short one."""
    n = len(ttft)
    kind = np.where(modality == Modality.TEXT.index, np.arange(n) % 2, modality + 1)
    arrival = np.arange(n, dtype=float)
    out = np.full(n, 11)
    if per_token is None:
        per_token = 0.01 + 0.02 * ((np.arange(n) * 37) % 100) / 100
    first = arrival + ttft
    return RequestRecords(
        arrival_s=arrival,
        first_token_s=first,
        finish_s=first + per_token * (out - 1),
        output_tokens=out,
        modality=modality,
        level=np.zeros(n, dtype=int),
        kind=kind,
    )


def _trace(seed: int, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """One seed's trace: exponential TTFTs (mean 1 s) and a mix of modalities."""
    rng = np.random.default_rng(1000 + seed)
    return rng.exponential(1.0, n), rng.choice([0, 1, 2], size=n, p=[0.6, 0.25, 0.15])


def _policy(scales: list[float], text_only: bool = False, noise: int | None = None) -> list[RequestRecords]:
    """Seed i's trace with every TTFT (or only the text TTFTs) multiplied by scales[i]; with `noise`
    (a seed), each request's TTFT also by its own lognormal factor (median 1, sigma 0.3)."""
    runs = []
    for seed, scale in enumerate(scales):
        ttft, modality = _trace(seed)
        factor = np.where(modality == Modality.TEXT.index, scale, 1.0) if text_only else scale
        if noise is not None:
            factor = factor * np.random.default_rng([noise, seed]).lognormal(0.0, 0.3, len(ttft))
        runs.append(_run(ttft * factor, modality))
    return runs


def test_headline_metrics_are_the_six_named() -> None:
    assert [m.name for m in HEADLINE_METRICS] == [
        "text P90 TTFT",
        "short-text P90 TTFT",
        "sand P90 TTFT",
        "text mean TTFT",
        "video mean TTFT",
        "video P99 TTFT",
        "TPOT mean",
        "normalized latency mean",
    ]


def test_metrics_of_hand_made_records() -> None:
    # text TTFTs 1..10 plus one that never started; video 2 and 4; one second from first token to
    # finish, so TPOT is 0.5 s over three tokens and none for a single token.
    ttft = np.array([*range(1, 11), np.nan, 2.0, 4.0])
    first = np.arange(13.0) + ttft
    records = RequestRecords(
        arrival_s=np.arange(13.0),
        first_token_s=first,
        finish_s=first + 1.0,
        output_tokens=np.array([3] * 10 + [1, 1, 3]),
        modality=np.array([0] * 11 + [2, 2]),
        level=np.zeros(13, dtype=int),
        kind=np.array([0] * 5 + [1] * 6 + [3, 3]),  # texts 1..5 short, 6..10 long
    )
    assert TEXT_P90.of(records) == pytest.approx(9.1)  # linear interpolation between 9 and 10
    assert METRICS["short-text P90 TTFT"].of(records) == pytest.approx(4.6)
    assert math.isnan(METRICS["short-text P90 TTFT"].of(replace(records, kind=None)))
    assert METRICS["text mean TTFT"].of(records) == pytest.approx(5.5)
    assert METRICS["video mean TTFT"].of(records) == pytest.approx(3.0)
    assert METRICS["video P99 TTFT"].of(records) == pytest.approx(2.0 + 0.99 * 2.0)
    assert METRICS["TPOT mean"].of(records) == pytest.approx(0.5)
    assert TEXT_P90.count(records) == 10 and METRICS["video P99 TTFT"].count(records) == 2


def test_percentile_metrics_agree_with_numpy() -> None:
    ttft, modality = _trace(0, n=501)
    ttft[::7] = np.nan  # requests that never started
    records = _run(ttft, modality)
    text, video = ttft[modality == 0], ttft[modality == 2]
    assert TEXT_P90.of(records) == pytest.approx(np.nanpercentile(text, 90), rel=1e-12)
    assert METRICS["video P99 TTFT"].of(records) == pytest.approx(np.nanpercentile(video, 99), rel=1e-12)
    assert METRICS["video mean TTFT"].of(records) == pytest.approx(np.nanmean(video), rel=1e-12)


def test_a_percentile_needs_values_beyond_it() -> None:
    assert TEXT_P90.min_values == 30
    assert METRICS["video P99 TTFT"].min_values == 300
    assert TEXT_MEAN.min_values == 1


def test_metric_of_no_values_is_nan_without_warning() -> None:
    text_only = _run(np.array([0.1, 0.2]), np.array([0, 0]))
    never_started = _run(np.array([np.nan]), np.array([2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(METRICS["video mean TTFT"].of(text_only))
        assert math.isnan(METRICS["video P99 TTFT"].of(text_only))
        assert math.isnan(METRICS["video mean TTFT"].of(never_started))


def test_identical_policies_differ_by_nothing() -> None:
    runs = _policy([1.0] * 4)
    for metric in (TEXT_P90, TEXT_MEAN, TPOT_MEAN):
        ratio = paired_ratio(runs, runs, metric)
        assert ratio.estimate == 1.0 and ratio.low == ratio.high == 1.0
        assert ratio.verdict() == "no difference measured" and not ratio.differs()
        assert ratio.seeds == 4 and ratio.requests == 4 * 240  # the steady windows


def test_halved_text_ttft_is_half_and_faster() -> None:
    baseline = _policy([1.0] * 5, noise=1)
    candidate = _policy([0.5] * 5, text_only=True, noise=1)
    ratio = paired_ratio(candidate, baseline, TEXT_P90)
    assert ratio.estimate == pytest.approx(0.5, rel=1e-12)
    assert ratio.per_seed == pytest.approx([0.5] * 5, rel=1e-12)
    assert ratio.differs() and ratio.verdict() == "faster"
    assert ratio.meets(0.6) and not ratio.meets(0.4)
    assert paired_ratio(candidate, baseline, METRICS["video mean TTFT"]).estimate == pytest.approx(1.0)
    assert paired_ratio(baseline, candidate, TEXT_P90).verdict() == "slower"


def test_the_estimate_is_the_geometric_mean_of_the_seeds() -> None:
    baseline = _policy([1.0] * 3)
    candidate = _policy([0.5, 1.0, 2.0])
    ratio = paired_ratio(candidate, baseline, TEXT_MEAN)
    assert ratio.per_seed == pytest.approx([0.5, 1.0, 2.0])
    assert ratio.estimate == pytest.approx(1.0)
    assert ratio.low < 0.5 and ratio.high > 2.0  # three seeds this far apart say little
    assert ratio.verdict() == "no difference measured"


def test_log_t_interval_by_hand() -> None:
    # log-ratios -0.1, 0, 0.1: mean 0, sd 0.1, t(0.975, 2) = 4.303.
    estimate, low, high = log_t_interval([math.exp(-0.1), 1.0, math.exp(0.1)])
    assert estimate == pytest.approx(1.0)
    assert math.log(high) == pytest.approx(4.3027 * 0.1 / math.sqrt(3), rel=1e-4)
    assert math.log(low) == pytest.approx(-math.log(high))
    with pytest.raises(ValueError):
        log_t_interval([0.9])


def test_unanswered_requests_refuse_the_ratio() -> None:
    baseline = _policy([1.0] * 3)
    candidate = _policy([0.5] * 3)
    lost = candidate[1].finish_s.copy()
    lost[3] = np.nan  # in the ramp-up, outside the steady window: it still refuses
    candidate[1] = replace(candidate[1], finish_s=lost)
    ratio = paired_ratio(candidate, baseline, TEXT_MEAN)
    assert not ratio.measured and "1 requests not completed" in ratio.refused
    assert math.isnan(ratio.estimate) and not ratio.differs() and not ratio.meets(10.0)
    assert ratio.verdict() == "not measured" and str(ratio).startswith("not measured")


def test_too_few_values_for_a_tail_percentile_refuse_the_ratio() -> None:
    runs = _policy([1.0] * 3)  # ~36 videos in each steady window: P99 needs 300
    ratio = paired_ratio(runs, runs, METRICS["video P99 TTFT"])
    assert not ratio.measured and "needs 300" in ratio.refused
    assert paired_ratio(runs, runs, METRICS["video mean TTFT"]).measured


def test_one_seed_gives_no_interval() -> None:
    ratio = paired_ratio(_policy([0.5]), _policy([1.0]), TEXT_MEAN)
    assert not ratio.measured and ratio.refused == "one seed: no interval"
    assert ratio.per_seed == pytest.approx([0.5])


def test_unpaired_or_empty_evidence_is_refused() -> None:
    runs = _policy([1.0] * 3)
    with pytest.raises(ValueError):
        paired_ratio(runs, runs[:2], TEXT_P90)
    with pytest.raises(ValueError, match="not the same traces"):
        paired_ratio(runs, [runs[0].select(np.arange(299)), *runs[1:]], TEXT_P90)
    with pytest.raises(ValueError):
        paired_ratio([], [], TEXT_P90)


def test_steady_keeps_only_the_window() -> None:
    # 100 arrivals in shuffled order: the default 10% trim keeps arrivals 10..89.
    arrival = np.random.default_rng(3).permutation(100).astype(float)
    run = RequestRecords(
        arrival_s=arrival,
        first_token_s=arrival + 0.5,
        finish_s=arrival + 1.0,
        output_tokens=np.full(100, 5),
        modality=np.zeros(100, dtype=int),
        level=np.zeros(100, dtype=int),
    )
    short = _run(np.full(20, 0.1), np.zeros(20, dtype=int))  # arrivals 0..19: keeps 2..17
    kept = steady([run, short])
    assert sorted(kept[0].arrival_s.tolist()) == list(range(10, 90))
    assert kept[1].arrival_s.tolist() == list(range(2, 18))
    assert sorted(steady([run], warm_up=0.3)[0].arrival_s.tolist()) == list(range(30, 90))


def test_a_longer_warm_up_measures_only_the_later_part_of_each_run() -> None:
    # The candidate halves every TTFT from the 150th arrival on (a queue it orders, once formed).
    baseline = _policy([1.0, 1.0, 1.0])
    candidate = []
    for run in baseline:
        later = np.where(run.arrival_s >= 150, 0.5, 1.0)
        candidate.append(replace(run, first_token_s=run.arrival_s + run.ttft * later))
    whole, late = (
        paired_ratio(candidate, baseline, TEXT_MEAN),
        paired_ratio(candidate, baseline, TEXT_MEAN, warm_up=0.5),
    )
    assert late.estimate == pytest.approx(0.5, rel=0.02) and 0.5 < whole.estimate < 0.9
    assert late.requests < whole.requests
    rows = ratio_rows({"fcfs": baseline, "rps": candidate}, "rps", [TEXT_MEAN], warm_up=0.5)
    assert rows["fcfs"][TEXT_MEAN.name].per_seed == late.per_seed


def test_ratio_reads_as_estimate_interval_and_n() -> None:
    faster = Ratio(estimate=0.62, low=0.48, high=0.80, seeds=3, requests=900)
    assert str(faster) == "0.62x [0.48, 0.80] n=3"
    assert faster.verdict() == "faster" and faster.differs()
    assert faster.meets(0.8) and not faster.meets(0.79)
    unclear = Ratio(estimate=0.9, low=0.7, high=1.05, seeds=3, requests=900)
    assert unclear.verdict() == "no difference measured" and not unclear.meets(1.0)
    nan = Ratio(estimate=math.nan, low=math.nan, high=math.nan, seeds=3, requests=900)
    assert nan.verdict() == "not measured" and str(nan) == "not measured (no interval)"


def test_ratio_rows_compare_the_candidate_with_every_other_policy() -> None:
    baseline = _policy([1.0] * 3)
    records = {
        "rps": _policy([0.5] * 3, text_only=True),
        "fcfs": baseline,
        "sjf": _policy([0.25] * 3, text_only=True),
    }
    metrics = (TEXT_P90, Metric("text TTFT sum", lambda r: r.ttft[r.modality == 0]))
    rows = ratio_rows(records, "rps", metrics)
    assert set(rows) == {"fcfs", "sjf"}
    assert rows["fcfs"]["text P90 TTFT"].estimate == pytest.approx(0.5)
    assert rows["sjf"]["text P90 TTFT"].estimate == pytest.approx(2.0)
    assert set(ratio_rows(records, "rps")["fcfs"]) == {m.name for m in HEADLINE_METRICS}
    with pytest.raises(ValueError):
        ratio_rows(records, "nope")


# Coverage on synthetic experiments. A run of seed i: every request's cost from the trace (shared
# by both policies' runs of it, as are the trace's bursts: a burst of arrivals slows every request in
# it), times bursts of the run's own (what else the machine did then), times a per-run random effect
# (the machine's speed during that run), times the policy's true effect. Both policies' runs of a
# trace are then exchangeable but for the effect, so the true ratio of every metric is the effect.
REQUESTS_PER_RUN = 120
BURST = 12  # requests that share a burst
TRUE_EFFECT = 0.7
EXPERIMENTS = 600


def _synthetic_runs(
    rng: np.random.Generator, seeds: int, effect: float, backlog_odds: float
) -> tuple[list[RequestRecords], list[RequestRecords]]:
    """A candidate's and a baseline's runs of `seeds` traces; a run falls into a backlog (everything
    three times slower) with probability `backlog_odds`, as runs near capacity do."""
    bursts = REQUESTS_PER_RUN // BURST
    candidate, baseline = [], []
    for _ in range(seeds):
        cost = rng.lognormal(-1.0, 0.8, REQUESTS_PER_RUN)
        per_token = rng.lognormal(-4.0, 0.3, REQUESTS_PER_RUN)
        shared = np.repeat(rng.lognormal(0.0, 0.5, bursts), BURST)
        modality = rng.choice([0, 1, 2], size=REQUESTS_PER_RUN, p=[0.7, 0.2, 0.1])
        for scale, runs in ((effect, candidate), (1.0, baseline)):
            run_effect = rng.lognormal(0.0, 0.25) * (3.0 if rng.random() < backlog_odds else 1.0)
            own = np.repeat(rng.lognormal(0.0, 0.4, bursts), BURST)
            slow = scale * run_effect * shared * own
            runs.append(_run(cost * slow, modality, per_token * slow))
    return candidate, baseline


def _coverage(
    seeds: int, backlog_odds: float, metric: Metric, warm_up: float = STEADY_STATE_TRIM
) -> tuple[float, list[Ratio]]:
    rng = np.random.default_rng([seeds, round(100 * backlog_odds), len(metric.name)])
    ratios = [
        paired_ratio(*_synthetic_runs(rng, seeds, TRUE_EFFECT, backlog_odds), metric, warm_up=warm_up)
        for _ in range(EXPERIMENTS)
    ]
    held = sum(r.low <= TRUE_EFFECT <= r.high for r in ratios)
    return held / EXPERIMENTS, ratios


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seeds", "warm_up"), [(3, STEADY_STATE_TRIM), (5, 0.3), (6, STEADY_STATE_TRIM), (12, STEADY_STATE_TRIM)]
)
@pytest.mark.parametrize("backlog_odds", [0.0, 0.25])
@pytest.mark.parametrize("metric", [TEXT_P90, TPOT_MEAN], ids=["text-P90", "TPOT-mean"])
def test_the_interval_holds_its_coverage(
    seeds: int, warm_up: float, backlog_odds: float, metric: Metric
) -> None:
    # At the seed counts and windows the comparisons (3, 6, 12 seeds) and the demo (5 seeds, each run
    # from 30% of its arrivals) use: at least 93% at a nominal 95%.
    coverage, ratios = _coverage(seeds, backlog_odds, metric, warm_up)
    assert all(r.measured for r in ratios)
    assert coverage >= 0.93, f"{coverage:.1%} of {EXPERIMENTS} intervals held the true ratio"


def test_an_interval_blind_to_the_seed_count_fails_the_same_check() -> None:
    # The same experiments with the normal quantile in place of Student's t (as if three seeds knew
    # their spread exactly): the check must catch it, or it proves nothing.
    _, ratios = _coverage(3, 0.25, TEXT_P90)
    z = norm.ppf(0.975)
    held = 0
    for ratio in ratios:
        logs = np.log(ratio.per_seed)
        half = z * logs.std(ddof=1) / math.sqrt(logs.size)
        held += logs.mean() - half <= math.log(TRUE_EFFECT) <= logs.mean() + half
    assert held / len(ratios) < 0.93
