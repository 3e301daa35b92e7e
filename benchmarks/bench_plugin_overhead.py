"""Scheduler overhead on a real vLLM engine: `schedule()` time of the RPS scheduler vs stock vLLM.

For each backlog size, a real engine holds that many waiting requests (real vLLM `Request` objects,
mixed text/image/video) beside a few running ones, and steps normally; the wall time of every
`schedule()` call is recorded (printed: median and interquartile range, both engines side by side).
Two set-ups, each a long queue that does not move while it is timed:
- `kv-bound`: sequence slots are free but the KV cache is not (the running texts' prompts hold it),
  so at every step RPS scores and orders the backlog, checks its media for a decode hold and looks
  for an eviction (none is allowed: the running requests are of the lightest class) before vLLM
  finds that nothing fits. This is the path the plug-in adds;
- `slots-full`: every sequence slot is busy decoding; nothing waiting can start, and the plug-in
  hands the step straight to stock vLLM.
Stock vLLM runs twice, as a user would configure it without the plug-in: FCFS, and its priority
policy with each request's modality as the priority (a heap instead of a deque). RPS runs with the
shipped `rps` settings of `model.json`. Needs a tiny model:
`make tiny-model && python benchmarks/bench_plugin_overhead.py build/tiny-qwen2-vl`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from rps_serve.workload.media import random_image, random_video
from rps_serve.workload.prompts import filler_text
from rps_serve.workload.request_format import RequestFormat

BACKLOGS = (64, 256, 1024, 4096)
RUNNING = 4
STEPS = 40
BLOCK_SIZE = 32
RUNNING_WORDS = 600  # each running text's prompt: ~600 tokens, ~19 blocks
WAITING_WORDS = 2200  # each waiting prompt: ~2,200 tokens or more, ~69 blocks
# The running texts' blocks, and room beside them for their decodes while every backlog is timed
# (RUNNING x 3 x STEPS tokens) but for no waiting prompt.
KV_BLOCKS = RUNNING * (RUNNING_WORDS * 3 // 2 // BLOCK_SIZE) + 24
SETUPS = ("kv-bound", "slots-full")
BASELINES = (Policy.FCFS, Policy.MODALITY_PRIORITY)


def _timed(fn: Callable[..., Any], samples: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            samples.append(time.perf_counter() - started)

    return wrapper


def _measure(model: Path, policy: Policy, setup: str) -> dict[int, list[float]]:
    import random

    from vllm import LLMEngine, SamplingParams

    from rps_serve.vllm_plugin.engine_args import engine_args

    kv_bound = setup == "kv-bound"
    limits: dict[str, Any] = {"max_model_len": 4096, "max_num_batched_tokens": 4096, "block_size": BLOCK_SIZE}
    if kv_bound:  # vLLM refuses a max_model_len the cache cannot hold
        cache_tokens = KV_BLOCKS * BLOCK_SIZE
        limits |= {"max_model_len": cache_tokens, "max_num_batched_tokens": cache_tokens}
        # One block more than the cache holds: vLLM keeps a null block.
        limits |= {"max_num_seqs": 2 * RUNNING, "num_gpu_blocks_override": KV_BLOCKS + 1}
    else:
        limits |= {"max_num_seqs": RUNNING}
    engine = LLMEngine.from_engine_args(engine_args(model, policy, rps_settings=_shipped_rps(), **limits))
    scheduler = engine.engine_core.engine_core.scheduler
    samples: list[float] = []
    scheduler.schedule = _timed(scheduler.schedule, samples)
    text_rng, media_rng = random.Random(0), np.random.default_rng(0)
    prompts = RequestFormat.of_model(model)
    long_decode = SamplingParams(max_tokens=1000, ignore_eos=True)
    running_words = RUNNING_WORDS if kv_bound else 50
    for i in range(RUNNING):
        busy = {"prompt": prompts.prompt(filler_text(running_words, text_rng), Modality.TEXT)}
        engine.add_request(f"busy{i}", busy, long_decode)
    for _ in range(5):
        engine.step()
    modalities = [Modality.TEXT, Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    waiting_words = WAITING_WORDS if kv_bound else 30
    timings: dict[int, list[float]] = {}
    queued = 0
    for backlog in BACKLOGS:
        while queued < backlog:
            modality = modalities[queued % len(modalities)]
            prompt: dict[str, Any] = {
                "prompt": prompts.prompt(filler_text(waiting_words, text_rng), modality)
            }
            if modality is Modality.IMAGE:
                prompt["multi_modal_data"] = {"image": random_image(224, 224, media_rng)}
            elif modality is Modality.VIDEO:
                prompt["multi_modal_data"] = {"video": random_video(4, 224, 224, media_rng)}
            engine.add_request(
                f"w{queued}",
                prompt,
                SamplingParams(max_tokens=4, ignore_eos=True),
                priority=policy.request_priority(0, modality),
            )
            queued += 1
        samples.clear()
        for _ in range(STEPS):
            engine.step()
        assert len(scheduler.waiting) == backlog, "a waiting request was admitted: the queue moved"
        assert len(scheduler.running) == RUNNING, "a running request finished or was preempted"
        timings[backlog] = list(samples)
    engine.engine_core.shutdown()
    return timings


def _spread(samples: list[float]) -> str:
    """Median and interquartile range of `samples`, in microseconds."""
    q1, median, q3 = (q * 1e6 for q in statistics.quantiles(samples, n=4))
    return f"{median:.1f} [{q1:.1f}, {q3:.1f}]"


def _shipped_rps() -> dict[str, Any]:
    """The `rps` settings `model.json` ships."""
    from rps_serve.local.checkout import REPOSITORY
    from rps_serve.triton.settings import SETTINGS_FILE

    shipped: dict[str, Any] = json.loads((REPOSITORY / SETTINGS_FILE).read_text()).get("rps", {})
    return shipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", type=Path)
    args = parser.parse_args()
    configure_cpu_engine_environment(Path(tempfile.mkdtemp(prefix="rps-bench-")))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the timer wraps the scheduler in this process
    policies = (*BASELINES, Policy.RPS)
    header = ("set-up", "waiting", *(f"{policy.value} us [p25, p75]" for policy in policies))
    header += tuple(f"rps/{policy.value}" for policy in BASELINES)
    columns = " {:>32}" * len(policies)
    print(("{:>10} {:>8}" + columns + " {:>22}" * len(BASELINES)).format(*header))
    for setup in SETUPS:
        timings = [_measure(args.model, policy, setup) for policy in policies]
        for backlog in BACKLOGS:
            medians = [statistics.median(timing[backlog]) for timing in timings]
            spreads = [_spread(timing[backlog]) for timing in timings]
            ratios = [medians[-1] / median for median in medians[:-1]]
            row = (setup, backlog, *spreads, *ratios)
            print(("{:>10} {:8d}" + columns + " {:>22.2f}" * len(BASELINES)).format(*row))


if __name__ == "__main__":
    main()
