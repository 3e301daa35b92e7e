"""Scheduler overhead on a real vLLM engine: `schedule()` time of the RPS scheduler vs stock vLLM.

For each backlog size, one real engine per policy holds that many waiting requests (real vLLM
`Request` objects, mixed text/image/video, the same in every engine) beside a few running ones; the
engines live in one process and step in turn, the first to step rotating, so that the machine's noise
lands on every policy alike. The wall time of every `schedule()` call is recorded (printed: median and
interquartile range, the policies side by side, and the plug-in's ratio to each stock policy).
Two set-ups, each a long queue that does not move while it is timed:
- `kv-bound`: sequence slots are free but the KV cache is not (the running texts' prompts hold it),
  so at every step the plug-in scores and orders the backlog, checks its media for a decode hold,
  asks whether its head may start (the KV reserve, under `headroom`) and, under `rps`, looks for an
  eviction (none is allowed: the running requests are of the lightest class) before vLLM finds that
  nothing fits. This is the path the plug-in adds;
- `slots-full`: every sequence slot is busy decoding; nothing waiting can start, and the plug-in
  hands the step straight to stock vLLM.
Stock vLLM runs twice, as a user would configure it without the plug-in: FCFS, and its priority
policy with each request's modality as the priority (a heap instead of a deque). The plug-in runs
`--policy` (default `headroom`, the shipped policy; `rps` the paper's) with the shipped `rps` settings
of `model.json`. Needs a tiny model:
`make tiny-model && python benchmarks/bench_plugin_overhead.py build/tiny-qwen2-vl [--policy rps]
[--setups kv-bound]` (both set-ups in one process outgrew a 23 GiB machine once, in `slots-full` at
4,096 waiting).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_harness.workload.request_format import RequestFormat
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

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


class _Engine:
    """One in-process engine under `policy` for `setup`, its `schedule()` timed, its sequence slots
    busy with long-running texts."""

    def __init__(self, model: Path, policy: Policy, setup: str) -> None:
        from vllm import LLMEngine, SamplingParams

        from rps_serve.vllm_plugin.engine_args import engine_args

        self.policy = policy
        limits: dict[str, Any] = {"max_model_len": 4096, "max_num_batched_tokens": 4096}
        limits["block_size"] = BLOCK_SIZE
        if setup == "kv-bound":  # vLLM refuses a max_model_len the cache cannot hold
            cache_tokens = KV_BLOCKS * BLOCK_SIZE
            limits |= {"max_model_len": cache_tokens, "max_num_batched_tokens": cache_tokens}
            # One block more than the cache holds: vLLM keeps a null block.
            limits |= {"max_num_seqs": 2 * RUNNING, "num_gpu_blocks_override": KV_BLOCKS + 1}
        else:
            limits |= {"max_num_seqs": RUNNING}
        settings = engine_args(model, policy, rps_settings=_shipped_rps(), **limits)
        self.engine = LLMEngine.from_engine_args(settings)
        self.scheduler = self.engine.engine_core.engine_core.scheduler
        self.samples: list[float] = []
        self.scheduler.schedule = _timed(self.scheduler.schedule, self.samples)
        self.sampling = SamplingParams(max_tokens=4, ignore_eos=True)
        self.long_decode = SamplingParams(max_tokens=1000, ignore_eos=True)

    def add(self, request_id: str, prompt: dict[str, Any], modality: Modality, running: bool) -> None:
        sampling = self.long_decode if running else self.sampling
        priority = 0 if running else self.policy.request_priority(0, modality)
        self.engine.add_request(request_id, prompt, sampling, priority=priority)

    def close(self) -> None:
        self.engine.engine_core.shutdown()


def _prompt(prompts: RequestFormat, words: int, modality: Modality, rngs: tuple[Any, Any]) -> dict[str, Any]:
    text_rng, media_rng = rngs
    prompt: dict[str, Any] = {"prompt": prompts.prompt(filler_text(words, text_rng), modality)}
    if modality is Modality.IMAGE:
        prompt["multi_modal_data"] = {"image": random_image(224, 224, media_rng)}
    elif modality is Modality.VIDEO:
        prompt["multi_modal_data"] = {"video": random_video(4, 224, 224, media_rng)}
    return prompt


def _measure(model: Path, setup: str, policies: tuple[Policy, ...]) -> dict[Policy, dict[int, list[float]]]:
    """`schedule()` times of every policy's engine at every backlog, the engines fed the same requests
    and stepped in turn (the first to step rotates from step to step), so that whatever else the
    machine does lands on every policy alike."""
    import random

    kv_bound = setup == "kv-bound"
    engines = [_Engine(model, policy, setup) for policy in policies]
    rngs = (random.Random(0), np.random.default_rng(0))
    prompts = RequestFormat.of_model(model)
    running_words = RUNNING_WORDS if kv_bound else 50
    for i in range(RUNNING):
        prompt = _prompt(prompts, running_words, Modality.TEXT, rngs)
        for engine in engines:
            engine.add(f"busy{i}", prompt, Modality.TEXT, running=True)
    for _ in range(5):
        for engine in engines:
            engine.engine.step()
    modalities = [Modality.TEXT, Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    waiting_words = WAITING_WORDS if kv_bound else 30
    timings: dict[Policy, dict[int, list[float]]] = {policy: {} for policy in policies}
    queued = 0
    for backlog in BACKLOGS:
        while queued < backlog:
            modality = modalities[queued % len(modalities)]
            prompt = _prompt(prompts, waiting_words, modality, rngs)
            for engine in engines:
                engine.add(f"w{queued}", prompt, modality, running=False)
            queued += 1
        for engine in engines:
            engine.samples.clear()
        for step in range(STEPS):
            for engine in engines[step % len(engines) :] + engines[: step % len(engines)]:
                engine.engine.step()
        for engine in engines:
            scheduler = engine.scheduler
            assert len(scheduler.waiting) == backlog, "a waiting request was admitted: the queue moved"
            assert len(scheduler.running) == RUNNING, "a running request finished or was preempted"
            timings[engine.policy][backlog] = list(engine.samples)
    for engine in engines:
        engine.close()
    engines.clear()
    gc.collect()  # the next set-up's engines need the memory these held (the backlogs' media)
    return timings


def _spread(samples: list[float]) -> str:
    """Median and interquartile range of `samples`, in microseconds."""
    q1, median, q3 = (q * 1e6 for q in statistics.quantiles(samples, n=4))
    return f"{median:.1f} [{q1:.1f}, {q3:.1f}]"


def _shipped_rps() -> dict[str, Any]:
    """The `rps` settings `model.json` ships."""
    from rps_harness.local.checkout import REPOSITORY
    from rps_serve.triton.settings import SETTINGS_FILE

    shipped: dict[str, Any] = json.loads((REPOSITORY / SETTINGS_FILE).read_text()).get("rps", {})
    return shipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", type=Path)
    parser.add_argument("--policy", type=Policy.parse, default=Policy.HEADROOM, help="the plug-in's policy")
    parser.add_argument(
        "--setups",
        type=lambda text: text.split(","),
        default=list(SETUPS),
        help="comma-separated, of " + ", ".join(SETUPS),
    )
    args = parser.parse_args()
    if args.policy.is_stock:
        parser.error(f"{args.policy.value} is stock vLLM's: name one of the plug-in's policies")
    policies = (*BASELINES, args.policy)
    configure_cpu_engine_environment(Path(tempfile.mkdtemp(prefix="rps-bench-")))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the timer wraps the scheduler in this process
    header = ("set-up", "waiting", *(f"{policy.value} us [p25, p75]" for policy in policies))
    header += tuple(f"{args.policy.value}/{policy.value}" for policy in BASELINES)
    columns = " {:>32}" * len(policies)
    print(("{:>10} {:>8}" + columns + " {:>22}" * len(BASELINES)).format(*header))
    if unknown := set(args.setups) - set(SETUPS):
        parser.error(f"unknown set-ups: {', '.join(sorted(unknown))}")
    for setup in args.setups:
        timings = _measure(args.model, setup, policies)
        for backlog in BACKLOGS:
            samples = [timings[policy][backlog] for policy in policies]
            medians = [statistics.median(sample) for sample in samples]
            ratios = [medians[-1] / median for median in medians[:-1]]
            row = (setup, backlog, *map(_spread, samples), *ratios)
            print(("{:>10} {:8d}" + columns + " {:>22.2f}" * len(BASELINES)).format(*row))


if __name__ == "__main__":
    main()
