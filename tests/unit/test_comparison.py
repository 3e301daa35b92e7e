"""Paired bootstrap ratios of policies on synthetic runs whose true ratios are known by construction."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest

from rps_serve.comparison import (
    HEADLINE_METRICS,
    Metric,
    Ratio,
    paired_ratio,
    ratio_rows,
    steady,
)
from rps_serve.metrics import RequestRecords
from rps_serve.requests import Modality

METRICS = {m.name: m for m in HEADLINE_METRICS}
TEXT_P90 = METRICS["text P90 TTFT"]
TEXT_MEAN = METRICS["text mean TTFT"]


def _run(ttft: np.ndarray, modality: np.ndarray) -> RequestRecords:
    """Requests arriving one per second with the given TTFTs, 11 output tokens each, decoding at
    0.01 to 0.03 s per token after the first (varied, so that TPOT has a spread to resample); every
    other text a short one."""
    n = len(ttft)
    kind = np.where(modality == Modality.TEXT.index, np.arange(n) % 2, modality + 1)
    arrival = np.arange(n, dtype=float)
    out = np.full(n, 11)
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
    (a seed), each request's TTFT also by its own lognormal factor (median 1, sigma 0.3): a policy's run
    of the same requests that scatters around the scaled trace."""
    runs = []
    for seed, scale in enumerate(scales):
        ttft, modality = _trace(seed)
        factor = np.where(modality == Modality.TEXT.index, scale, 1.0) if text_only else scale
        if noise is not None:
            factor = factor * np.random.default_rng([noise, seed]).lognormal(0.0, 0.3, len(ttft))
        runs.append(_run(ttft * factor, modality))
    return runs


def _permuted(runs: list[RequestRecords], seed: int = 0) -> list[RequestRecords]:
    """The same runs with each run's rows shuffled: every seed's requests as before, but row j no
    longer the same request as the other policy's row j."""
    rng = np.random.default_rng(seed)
    return [run.select(rng.permutation(len(run.arrival_s))) for run in runs]


def test_headline_metrics_are_the_six_named() -> None:
    assert [m.name for m in HEADLINE_METRICS] == [
        "text P90 TTFT",
        "short-text P90 TTFT",
        "text mean TTFT",
        "video mean TTFT",
        "video P99 TTFT",
        "TPOT mean",
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


def test_percentile_metrics_agree_with_numpy() -> None:
    ttft, modality = _trace(0, n=501)
    ttft[::7] = np.nan  # requests that never started
    records = _run(ttft, modality)
    text, video = ttft[modality == 0], ttft[modality == 2]
    assert TEXT_P90.of(records) == pytest.approx(np.nanpercentile(text, 90), rel=1e-12)
    assert METRICS["video P99 TTFT"].of(records) == pytest.approx(np.nanpercentile(video, 99), rel=1e-12)
    assert METRICS["video mean TTFT"].of(records) == pytest.approx(np.nanmean(video), rel=1e-12)


def test_metric_of_no_values_is_nan_without_warning() -> None:
    text_only = _run(np.array([0.1, 0.2]), np.array([0, 0]))
    never_started = _run(np.array([np.nan]), np.array([2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(METRICS["video mean TTFT"].of(text_only))
        assert math.isnan(METRICS["video P99 TTFT"].of(text_only))
        assert math.isnan(METRICS["video mean TTFT"].of(never_started))
        assert math.isnan(METRICS["video P99 TTFT"].of(never_started))


def test_identical_policies_differ_by_nothing() -> None:
    runs = _policy([1.0] * 4)
    for metric in HEADLINE_METRICS:
        ratio = paired_ratio(runs, runs, metric, resamples=400)
        assert ratio.estimate == 1.0
        assert ratio.low == ratio.high == 1.0  # every resample draws the same requests for both
        assert not ratio.differs()
        assert ratio.verdict() == "no difference measured"
        assert ratio.seeds == 4 and ratio.requests == 4 * 300


def test_halved_text_ttft_is_half_and_faster() -> None:
    baseline = _policy([1.0] * 5)
    candidate = _policy([0.5] * 5, text_only=True)
    ratio = paired_ratio(candidate, baseline, TEXT_P90)
    assert ratio.estimate == pytest.approx(0.5, rel=1e-12)
    assert ratio.low <= 0.5 <= ratio.high
    assert ratio.per_seed == pytest.approx([0.5] * 5, rel=1e-12)
    assert ratio.differs()
    assert ratio.verdict() == "faster"
    assert ratio.meets(0.6)
    assert not ratio.meets(0.4)
    # Video was left alone: its ratio is 1 and the reverse comparison is slower.
    assert paired_ratio(candidate, baseline, METRICS["video mean TTFT"]).estimate == pytest.approx(1.0)
    assert paired_ratio(baseline, candidate, TEXT_P90).verdict() == "slower"


def test_between_seed_scatter_widens_the_interval() -> None:
    baseline = _policy([1.0] * 5, noise=1)
    steady_scale = paired_ratio(_policy([0.7] * 5, noise=2), baseline, TEXT_MEAN)
    # Same mean scale over the seeds, but each seed's candidate is much better or much worse.
    scattered = paired_ratio(_policy([0.1, 1.6, 0.3, 1.2, 0.3], noise=2), baseline, TEXT_MEAN)
    assert steady_scale.estimate == pytest.approx(0.7, rel=0.05)
    assert (scattered.high - scattered.low) > 3 * (steady_scale.high - steady_scale.low)
    assert steady_scale.differs() and not scattered.differs()


def test_pairing_cancels_scatter_both_policies_share() -> None:
    # The traces differ a lot from seed to seed and the requests within a trace too, the same way for
    # both policies; each policy's run scatters around its own scale. Pairing seeds and requests keeps
    # the shared scatter out of the interval: breaking the request pairing (the same rows, shuffled)
    # leaves the estimate alone and widens the interval.
    shared = [0.2, 3.0, 1.0, 0.5, 2.0]
    baseline = _policy(shared, noise=1)
    candidate = _policy([0.8 * s for s in shared], noise=2)
    for metric in (TEXT_MEAN, TEXT_P90):
        paired = paired_ratio(candidate, baseline, metric)
        unpaired = paired_ratio(_permuted(candidate), baseline, metric)
        assert paired.estimate == pytest.approx(unpaired.estimate, rel=1e-12)
        assert paired.low < 0.8 < paired.high < 1.0
        assert (unpaired.high - unpaired.low) > 1.25 * (paired.high - paired.low)


def test_the_interval_covers_the_true_ratio() -> None:
    # 40 experiments of 3 paired seeds, the candidate 0.8x the baseline in distribution, each run
    # scattering on its own: the 95% interval must hold 0.8 in most of them and exclude 1 in most
    # (neither overconfident nor blind at this size).
    held = excluded_one = 0
    for experiment in range(40):
        baseline = _policy([1.0] * 3, noise=100 + experiment)
        candidate = _policy([0.8] * 3, noise=200 + experiment)
        ratio = paired_ratio(candidate, baseline, TEXT_MEAN, resamples=300, seed=experiment)
        held += ratio.low <= 0.8 <= ratio.high
        excluded_one += ratio.differs()
    assert held >= 34
    assert excluded_one >= 30


def test_unpaired_or_empty_evidence_is_refused() -> None:
    runs = _policy([1.0] * 3)
    with pytest.raises(ValueError):
        paired_ratio(runs, runs[:2], TEXT_P90)
    with pytest.raises(ValueError, match="not the same traces"):
        paired_ratio(runs, [runs[0].select(np.arange(299)), *runs[1:]], TEXT_P90)
    with pytest.raises(ValueError):
        paired_ratio([], [], TEXT_P90)


def test_a_seed_without_requests_contributes_none() -> None:
    runs = _policy([1.0] * 3)
    empty = runs[0].select(np.zeros(300, dtype=bool))
    candidate = [*_policy([0.5] * 3, text_only=True), empty]
    ratio = paired_ratio(candidate, [*runs, empty], TEXT_P90, resamples=300)
    assert ratio.estimate == pytest.approx(0.5)
    assert ratio.seeds == 4 and ratio.requests == 900
    assert ratio.high < 1


def test_same_seed_same_interval() -> None:
    baseline = _policy([1.0] * 3)
    candidate = _policy([0.8, 0.9, 0.7])
    first = paired_ratio(candidate, baseline, TEXT_P90, resamples=300, seed=7)
    again = paired_ratio(candidate, baseline, TEXT_P90, resamples=300, seed=7)
    other = paired_ratio(candidate, baseline, TEXT_P90, resamples=300, seed=8)
    assert (first.low, first.high) == (again.low, again.high)
    assert (first.low, first.high) != (other.low, other.high)
    assert first.estimate == other.estimate  # the estimate does not depend on resampling


def test_no_finite_ratio_gives_nan_interval() -> None:
    text_only = [_run(np.array([0.1, 0.2, 0.3]), np.array([0, 0, 0]))] * 2
    ratio = paired_ratio(text_only, text_only, METRICS["video mean TTFT"], resamples=50)
    assert math.isnan(ratio.estimate) and math.isnan(ratio.low) and math.isnan(ratio.high)
    assert not ratio.differs()
    assert ratio.verdict() == "no difference measured"


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
    assert len(kept) == 2
    assert sorted(kept[0].arrival_s.tolist()) == list(range(10, 90))
    assert np.array_equal(kept[0].first_token_s - kept[0].arrival_s, np.full(80, 0.5))
    assert kept[1].arrival_s.tolist() == list(range(2, 18))


def test_ratio_reads_as_estimate_and_interval() -> None:
    faster = Ratio(estimate=0.62, low=0.48, high=0.80, seeds=3, requests=900)
    assert str(faster) == "0.62x [0.48, 0.80]"
    assert faster.verdict() == "faster" and faster.differs()
    assert faster.meets(0.8) and not faster.meets(0.79)
    slower = Ratio(estimate=1.3, low=1.1, high=1.5, seeds=3, requests=900)
    assert slower.verdict() == "slower" and slower.differs() and not slower.meets(1.0)
    unclear = Ratio(estimate=0.9, low=0.7, high=1.05, seeds=3, requests=900)
    assert unclear.verdict() == "no difference measured" and not unclear.differs()
    assert not unclear.meets(1.0)  # the estimate is below 1 but the interval is not


def test_ratio_rows_compare_the_candidate_with_every_other_policy() -> None:
    baseline = _policy([1.0] * 3)
    records = {
        "rps": _policy([0.5] * 3, text_only=True),
        "fcfs": baseline,
        "sjf": _policy([0.25] * 3, text_only=True),
    }
    metrics = (TEXT_P90, Metric("text count", lambda r: float(np.sum(r.modality == 0))))
    rows = ratio_rows(records, "rps", metrics)
    assert set(rows) == {"fcfs", "sjf"}
    assert set(rows["fcfs"]) == {"text P90 TTFT", "text count"}
    assert rows["fcfs"]["text P90 TTFT"].estimate == pytest.approx(0.5)
    assert rows["sjf"]["text P90 TTFT"].estimate == pytest.approx(2.0)
    assert rows["fcfs"]["text count"].estimate == 1.0
    # The headline metrics by default (small runs: only the keys are checked here).
    small = {
        name: [run.select(np.arange(30))] for name, run in (("rps", records["rps"][0]), ("fcfs", baseline[0]))
    }
    assert set(ratio_rows(small, "rps")["fcfs"]) == {m.name for m in HEADLINE_METRICS}
    with pytest.raises(ValueError):
        ratio_rows(records, "nope")
