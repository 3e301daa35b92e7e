"""Figures of per-request records, simulated or measured: TTFT CDF per modality per policy, and
latency against load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.metrics import RequestRecords
from rps_serve.requests import Modality


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ValueError("plotting needs matplotlib: pip install 'rps-serve[plot]'") from error
    return plt


def plot_ttft_cdf(records: Mapping[str, RequestRecords], out: Path, title: str = "") -> None:
    """One panel per modality, one TTFT CDF per policy (log time axis)."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(Modality), figsize=(4.2 * len(Modality), 3.4), sharey=True)
    for axis, modality in zip(axes, Modality, strict=True):
        for policy, rec in records.items():
            ttft = np.sort(rec.ttft[(rec.modality == modality.index) & np.isfinite(rec.ttft)])
            if ttft.size:
                axis.plot(ttft, np.arange(1, ttft.size + 1) / ttft.size, label=policy)
        axis.set_xscale("log")
        axis.tick_params(axis="x", which="minor", labelbottom=False)
        axis.set_title(modality.value)
        axis.set_xlabel("TTFT (s)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    axes[-1].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def plot_latency_vs_load(
    rates: Sequence[float],
    series: Mapping[str, Mapping[str, Sequence[float]]],
    out: Path,
    title: str = "",
) -> None:
    """One panel per metric (`series[metric][policy]` aligned with `rates`), log latency axis."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(series), figsize=(4.2 * len(series), 3.4))
    for axis, (metric, by_policy) in zip(np.atleast_1d(axes), series.items(), strict=True):
        for policy, values in by_policy.items():
            axis.plot(rates, values, marker="o", label=policy)
        axis.set_yscale("log")
        axis.set_title(metric)
        axis.set_xlabel("request rate (req/s)")
        axis.grid(alpha=0.3)
    np.atleast_1d(axes)[-1].legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)
