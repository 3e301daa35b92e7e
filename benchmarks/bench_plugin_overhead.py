"""Scheduler overhead on a real vLLM engine: `schedule()` time of the RPS scheduler vs stock vLLM.

For each backlog size, a full engine (every sequence slot busy decoding) holds that many waiting
requests (real vLLM `Request` objects, mixed text/image/video), and the engine steps normally; the
wall time of every `schedule()` call is recorded. This is the steady state in which a scheduler
matters: a long queue behind a full batch. Needs a tiny model:
`make tiny-model && python benchmarks/bench_plugin_overhead.py build/tiny-qwen2-vl`.
"""

from __future__ import annotations

import argparse
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

BACKLOGS = (64, 256, 1024)
RUNNING = 4
STEPS = 40


def _timed(fn: Callable[..., Any], samples: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            samples.append(time.perf_counter() - started)

    return wrapper


def _measure(model: Path, policy: Policy) -> dict[int, float]:
    import random

    from vllm import LLMEngine, SamplingParams

    from rps_serve.vllm_plugin.engine_args import engine_args

    engine = LLMEngine.from_engine_args(
        engine_args(model, policy, max_num_seqs=RUNNING, max_model_len=4096, max_num_batched_tokens=4096)
    )
    scheduler = engine.engine_core.engine_core.scheduler
    samples: list[float] = []
    scheduler.schedule = _timed(scheduler.schedule, samples)
    text_rng, media_rng = random.Random(0), np.random.default_rng(0)
    prompts = RequestFormat.of_model(model)
    long_decode = SamplingParams(max_tokens=100_000 // 100, ignore_eos=True)
    for i in range(RUNNING):
        engine.add_request(
            f"busy{i}", {"prompt": prompts.prompt(filler_text(50, text_rng), Modality.TEXT)}, long_decode
        )
    for _ in range(5):
        engine.step()
    modalities = [Modality.TEXT, Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    medians: dict[int, float] = {}
    queued = 0
    for backlog in BACKLOGS:
        while queued < backlog:
            modality = modalities[queued % len(modalities)]
            prompt: dict[str, Any] = {"prompt": prompts.prompt(filler_text(30, text_rng), modality)}
            if modality is Modality.IMAGE:
                prompt["multi_modal_data"] = {"image": random_image(224, 224, media_rng)}
            elif modality is Modality.VIDEO:
                prompt["multi_modal_data"] = {"video": random_video(4, 224, 224, media_rng)}
            engine.add_request(f"w{queued}", prompt, SamplingParams(max_tokens=4, ignore_eos=True))
            queued += 1
        samples.clear()
        for _ in range(STEPS):
            engine.step()
        assert len(scheduler.waiting) == backlog, "a waiting request was admitted: the batch was not full"
        medians[backlog] = statistics.median(samples)
    engine.engine_core.shutdown()
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", type=Path)
    args = parser.parse_args()
    configure_cpu_engine_environment(Path(tempfile.mkdtemp(prefix="rps-bench-")))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the timer wraps the scheduler in this process
    stock = _measure(args.model, Policy.FCFS)
    rps = _measure(args.model, Policy.RPS)
    print(f"{'waiting':>8} {'stock us':>9} {'rps us':>9} {'rps/stock':>9}")
    for backlog in BACKLOGS:
        ratio = rps[backlog] / stock[backlog]
        print(f"{backlog:8d} {stock[backlog] * 1e6:9.1f} {rps[backlog] * 1e6:9.1f} {ratio:9.2f}")


if __name__ == "__main__":
    main()
