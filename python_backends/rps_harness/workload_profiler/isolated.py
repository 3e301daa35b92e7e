"""Runs requests one at a time on an in-process vLLM engine and times the vision encoder and prefill."""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_harness.workload.request_format import MediaShape, RequestFormat
from rps_harness.workload_profiler.plan import ProfileItem, ProfilePlan
from rps_serve.model_processor import load_processor, placeholder_tokens
from rps_serve.profiles.records import ProfileRecord, read_records
from rps_serve.requests import Modality
from rps_serve.vllm_plugin.classify import engine_request_features

logger = logging.getLogger(__name__)

DEFAULT_MAX_MODEL_LEN = 8192  # where the served engine arguments leave it to the model
# Filler pseudo-words take about 1.5 tokens each on the tiny models' tokenizer, a chat turn a few
# dozen: bounds for `fits` (the profile records the engine's own counts).
TOKENS_PER_WORD_BOUND = 2
TURN_TOKENS_BOUND = 64


class EncoderTimer:
    """Wraps the model runner's vision-encoder call and accumulates its wall time."""

    def __init__(self, model_runner: Any) -> None:
        self.seconds = 0.0
        encode: Callable[..., Any] = model_runner._execute_mm_encoder

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return encode(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        model_runner._execute_mm_encoder = timed


def profiling_max_model_len(served_args: Mapping[str, Any]) -> int:
    """The profiling engine's `max_model_len` (and its step's token budget)."""
    return int(served_args.get("max_model_len") or DEFAULT_MAX_MODEL_LEN)


def image_side(item: ProfileItem, media: MediaShape) -> int:
    """The side, in pixels, of the square image `item` sends."""
    return round(media.image_size * item.image_scale)


def fits(item: ProfileItem, processor: Any, media: MediaShape, max_model_len: int) -> bool:
    """Whether `item`'s prompt stays within `max_model_len` tokens: its media's placeholders exactly
    (by the model's `processor`), its text by a bound (the same answer for any draw of its words)."""
    side, video = image_side(item, media), media.video_size
    images, videos = placeholder_tokens(
        processor,
        [(side, side)] if item.modality is Modality.IMAGE else [],
        [(item.video_frames, video, video)] if item.modality is Modality.VIDEO else [],
    )
    text = TOKENS_PER_WORD_BOUND * item.text_words + TURN_TOKENS_BOUND
    return sum(images) + sum(videos) + text <= max_model_len


def profiling_engine(model: Path, served_args: Mapping[str, Any]) -> tuple[Any, EncoderTimer]:
    """An engine for `model` with the engine arguments it is served with (`served_args`, model.json's),
    changed only where isolated timing needs it: stock FCFS, no prefix cache, the engine core and its
    worker in this process, synchronous steps, and the whole prompt in one step (its time is one
    step's time). One worker: a tensor-parallel model cannot be profiled this way."""
    from vllm import EngineArgs, LLMEngine

    max_model_len = profiling_max_model_len(served_args)
    args = EngineArgs(
        **{
            **served_args,
            "model": str(model),
            "max_model_len": max_model_len,
            "max_num_batched_tokens": max_model_len,
            "enable_prefix_caching": False,
            "scheduling_policy": "fcfs",
            "async_scheduling": False,
            "distributed_executor_backend": "uni",
        }
    )
    # The timer must reach the model runner: engine core in this process (read when the engine is made).
    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        engine = LLMEngine.from_engine_args(args)
    finally:
        if previous is None:
            del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    return engine, EncoderTimer(runner)


class IsolatedProfiler:
    """Profiles one request at a time: nothing else is in the engine while a request runs."""

    def __init__(
        self, engine: Any, timer: EncoderTimer, served: RequestFormat, output_tokens: int, seed: int
    ) -> None:
        self._engine, self._timer, self._served = engine, timer, served
        self._scheduler = engine.engine_core.engine_core.scheduler
        self._output_tokens = output_tokens
        self._text_rng = random.Random(seed)
        self._media_rng = np.random.default_rng(seed)
        self._count = 0

    def _prompt(self, item: ProfileItem) -> dict[str, Any]:
        prompt: dict[str, Any] = {
            "prompt": self._served.prompt(filler_text(item.text_words, self._text_rng), item.modality)
        }
        if item.modality is Modality.IMAGE:
            side = image_side(item, self._served.media)
            prompt["multi_modal_data"] = {"image": random_image(side, side, self._media_rng)}
        elif item.modality is Modality.VIDEO:
            side = self._served.media.video_size
            prompt["multi_modal_data"] = {
                "video": random_video(item.video_frames, side, side, self._media_rng)
            }
        return prompt

    def run(self, item: ProfileItem) -> ProfileRecord:
        from vllm import SamplingParams

        self._count += 1
        request_id = f"profile-{self._count}"
        params = SamplingParams(max_tokens=self._output_tokens, ignore_eos=True)
        self._engine.add_request(request_id, self._prompt(item), params)
        self._timer.seconds = 0.0
        # Isolated: the request is the only one the engine core holds.
        (request,) = self._scheduler.requests.values()
        features = engine_request_features(request)
        first_step_s: float | None = None
        encoder_s = 0.0
        output_tokens = 0
        while self._engine.has_unfinished_requests():
            started = time.perf_counter()
            outputs = self._engine.step()
            elapsed = time.perf_counter() - started
            for output in outputs:
                if first_step_s is None and output.outputs and output.outputs[0].token_ids:
                    first_step_s, encoder_s = elapsed, self._timer.seconds
                if output.finished:
                    output_tokens = len(output.outputs[0].token_ids)
        if first_step_s is None:
            raise RuntimeError(f"{request_id} produced no token")
        return ProfileRecord(
            modality=features.modality,
            prompt_tokens=features.prompt_tokens,
            modality_tokens=features.modality_tokens,
            encoder_s=encoder_s,
            prefill_s=max(first_step_s - encoder_s, 0.0),
            output_tokens=output_tokens,
        )


@dataclass(frozen=True)
class ProfileRun:
    """What a profile run wrote, where its engine computed and where the engine's own output went."""

    written: int  # records appended
    cores: tuple[int, ...]  # the cores the profiling engine could run on
    threads: int  # its torch threads
    engine_log: Path

    def describe(self) -> str:
        cores = ",".join(str(core) for core in self.cores)
        return f"{self.written} records measured on core(s) {cores} with {self.threads} torch thread(s)"


def profile_served_model(
    model: Path, served_args: Mapping[str, Any], out: Path, repeats: int = 3, seed: int = 0
) -> ProfileRun:
    """Run the profile plan on `model` with the engine arguments it is served with (`served_args`,
    model.json's), appending a record per planned request to `out` after the ones it already holds
    (the plan is fixed, so a partial file resumes). Planned requests longer than the engine's
    `max_model_len` are left out, the same ones every time.

    On the CPU platform the engine computes in a process of its own, on the cores and with the
    threads a served worker gets (`cpu_env.profiling_cores`), so that the profile times the engine as
    it is served: with every core to itself it runs up to twice as fast on two cores, and slows with
    whatever else runs on any of them."""
    cores = _profiling_cores()
    if cores is None:
        return _profile(model, dict(served_args), out, repeats, seed)
    from rps_serve.vllm_plugin.cpu_env import compute_on

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, context, initializer=compute_on, initargs=(cores,)) as pool:
        return pool.submit(_profile, model, dict(served_args), out, repeats, seed).result()


def _profiling_cores() -> tuple[int, ...] | None:
    """Where a CPU engine's profile computes; None on other platforms (a GPU computes there)."""
    from vllm.platforms import current_platform

    from rps_serve.vllm_plugin.cpu_env import profiling_cores

    return profiling_cores() if current_platform.is_cpu() else None


def engine_log_of(out: Path) -> Path:
    """Where a profile written to `out` sends the engine's output: beside it, named after it."""
    return out.with_name(out.name.split(".")[0] + "-engine.log")


@contextmanager
def _engine_output_to(log: Path) -> Iterator[TextIO]:
    """This process's stdout and stderr (vLLM's logs, warnings and configuration dump) appended to
    `log` while the engine runs; yields a stream on the former stderr for the progress bar."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    progress = os.fdopen(os.dup(2), "w")
    with log.open("a", encoding="utf-8") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield progress
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, original in zip((1, 2), saved, strict=True):
                os.dup2(original, fd)
                os.close(original)
            progress.close()


def _profile(model: Path, served_args: Mapping[str, Any], out: Path, repeats: int, seed: int) -> ProfileRun:
    with _engine_output_to(engine_log_of(out)) as progress:
        return _profile_quietly(model, served_args, out, repeats, seed, progress)


def _profile_quietly(
    model: Path, served_args: Mapping[str, Any], out: Path, repeats: int, seed: int, progress: TextIO
) -> ProfileRun:
    import torch
    from tqdm import tqdm

    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    done = sum(1 for _ in read_records(out)) if out.exists() else 0
    plan = ProfilePlan(repeats=repeats)
    max_model_len = profiling_max_model_len(served_args)
    processor = load_processor(model)
    served = RequestFormat.of_model(model, processor=processor)
    planned = [item for item in plan.items() if fits(item, processor, served.media, max_model_len)]
    if skipped := len(plan.items()) - len(planned):
        logger.info("skipping %d planned requests longer than max_model_len %d", skipped, max_model_len)
    items = planned[done:]
    if items:
        configure_cpu_engine_environment(out.parent / ".vllm")
        engine, timer = profiling_engine(model, served_args)
        profiler = IsolatedProfiler(engine, timer, served, plan.output_tokens, seed + done)
        for warm_up in planned[:2]:  # first calls pay one-off initialization
            profiler.run(warm_up)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as records:
            for item in tqdm(items, desc="isolated runs", unit="request", file=progress):
                records.write(profiler.run(item).to_json() + "\n")
                records.flush()
    cores = tuple(sorted(os.sched_getaffinity(0)))
    return ProfileRun(len(items), cores, torch.get_num_threads(), engine_log_of(out))
