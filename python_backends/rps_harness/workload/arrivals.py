"""Arrival processes: Poisson, and Gamma-distributed gaps for bursty load at the same mean rate."""

from __future__ import annotations

import numpy as np


def poisson_arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of `n` requests of a Poisson process with `rate` requests per second."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def gamma_arrivals(rate: float, cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times with Gamma gaps of mean 1/rate and coefficient of variation `cv`.

    cv = 1 is Poisson; cv > 1 clusters arrivals into bursts separated by long gaps.
    """
    if rate <= 0 or cv <= 0:
        raise ValueError(f"rate and cv must be positive, got rate={rate}, cv={cv}")
    shape = 1.0 / cv**2
    return np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), size=n))
