"""Cost of one scheduling iteration of the Queue Manager, and memory per queued request.

One iteration = `begin_iteration()` (clock, per-class stats, boost update) plus either the full
priority order of every waiting request (`ordered`) or popping the 32 best heads (`pop32`, what a
vLLM step admits at most in practice). Run: `python -m benchmarks.bench_scheduling`.
"""

from __future__ import annotations

import argparse
import math
import tracemalloc
from functools import partial

import numpy as np

from benchmarks.timing import median_seconds
from rps_serve.scheduling.parameters import Policy, class_ladder
from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.regulator import PriorityRegulator

SIZES = (10, 100, 1_000, 10_000)
MIX = (0.7, 0.2, 0.1)  # sand, pebbles, rocks


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _filled(n: int, rng: np.random.Generator) -> tuple[ClassQueues[int], _Clock, np.ndarray, np.ndarray]:
    clock = _Clock()
    queues: ClassQueues[int] = ClassQueues(PriorityRegulator(Policy.RPS, class_ladder(3)), clock=clock)
    levels = rng.choice(3, size=n, p=MIX)
    arrivals = np.sort(rng.uniform(0.0, 60.0, size=n))
    for i in range(n):
        queues.add(i, int(levels[i]), float(arrivals[i]))
    clock.now = 60.0
    return queues, clock, levels, arrivals


def _iterate_ordered(queues: ClassQueues[int], clock: _Clock) -> None:
    clock.now += 0.01
    queues.begin_iteration()
    queues.ordered()


def _iterate_pop32(queues: ClassQueues[int], clock: _Clock, levels: np.ndarray, arrivals: np.ndarray) -> None:
    clock.now += 0.01
    queues.begin_iteration()
    popped = [queues.pop() for _ in range(min(32, len(queues)))]
    for item in popped:  # put them back, as vLLM prepends what it could not schedule
        queues.add(item, int(levels[item]), float(arrivals[item]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'queued':>8} {'ordered us':>11} {'us/req':>7} {'/ n log n':>10} {'pop32 us':>9} {'bytes/req':>10}"
    )
    for n in SIZES:
        queues, clock, levels, arrivals = _filled(n, rng)

        full = median_seconds(partial(_iterate_ordered, queues, clock), args.repeats)
        heads = median_seconds(partial(_iterate_pop32, queues, clock, levels, arrivals), args.repeats)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = _filled(n, np.random.default_rng(1))
        per_request = (tracemalloc.get_traced_memory()[0] - before) / n
        tracemalloc.stop()
        del kept
        print(
            f"{n:8d} {full * 1e6:11.1f} {full * 1e6 / n:7.2f} {full * 1e9 / (n * math.log2(n)):10.1f}"
            f" {heads * 1e6:9.1f} {per_request:10.0f}"
        )


if __name__ == "__main__":
    main()
