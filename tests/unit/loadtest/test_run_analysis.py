"""A run log cut to a window and summarized: engine steps, the loop's lag, each class's stages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rps_harness.loadtest.run_analysis import (
    MIN_LONE_DECODE_STEPS,
    STAGES,
    STEP_IN_PROGRESS,
    engine_run,
    first_token_tail,
    pooled,
    read_run_log,
    step_in_progress_waits,
    summarize,
)
from rps_harness.metrics import RequestRecords


def _step(t: float, step_ms: float, prefill: int, decode: int, waiting: int, preempted: int = 0) -> dict:
    return {
        "kind": "step", "t": t, "running": decode + (prefill > 0), "waiting": waiting, "kv": 0.1,
        "preempted": preempted, "step_ms": step_ms, "prefill_requests": int(prefill > 0),
        "prefill_tokens": prefill, "decode_requests": decode, "decode_tokens": decode, "encoder_inputs": 0,
    }  # fmt: skip


def _request(arrival: float, level: int, queue: float) -> dict:
    stages = dict.fromkeys(STAGES, 0.01) | {"engine_queue_s": queue}
    return {"kind": "request", "t": arrival + 1, "arrival": arrival, "level": level,
            **stages, "to_first_token_s": sum(stages.values())}  # fmt: skip


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"kind": "st')  # a torn last line
    return path


def test_the_window_keeps_only_its_own_steps_lags_and_requests(tmp_path: Path) -> None:
    records = [
        _step(5.0, 999.0, 2048, 0, 9, preempted=4),  # before the window
        *(_step(10.0 + i, 10.0 + 90 * (i % 4 == 0), 2048 * (i % 4 == 0), 3, i % 2) for i in range(8)),
        {"kind": "lag", "t": 12.0, "lag_s": 0.002},
        {"kind": "lag", "t": 13.0, "lag_s": 0.010},
        {"kind": "lag", "t": 30.0, "lag_s": 5.0},  # after it
        _request(11.0, 0, 0.1), _request(12.0, 0, 0.3), _request(12.5, 2, 2.0), _request(40.0, 0, 9.0),
    ]  # fmt: skip
    path = _write(tmp_path / "run.jsonl", records)
    assert len(read_run_log(path)) == len(records)
    summary = summarize(path, 10.0, 17.0)
    engine = summary["engine"]
    assert engine["steps"] == 8
    assert engine["busy"] == pytest.approx((2 * 100 + 6 * 10) / 1000 / 7.0)
    assert engine["mixed_step_ms"] == 100.0 and engine["decode_step_ms"] == 10.0
    # Every step decodes 3 requests: each sits through the mean step.
    assert engine["step_ms_per_decode"] == pytest.approx(engine["step_ms_mean"])
    assert engine["prefill_share"] == 0.25 and engine["waiting"] == 0.5 and engine["preemptions"] == 0
    assert engine["lone_decode_step_ms"] != engine["lone_decode_step_ms"]  # no step decoded one alone
    assert summary["loop_lag_s"]["max"] == 0.010
    stages = summary["stages"]
    assert set(stages) == {"sand", "rocks"} and stages["sand"]["requests"] == 2
    assert stages["sand"]["engine_queue_s"] == pytest.approx(0.2)


def test_pooled_stages_weigh_each_run_by_its_requests(tmp_path: Path) -> None:
    one = summarize(_write(tmp_path / "a.jsonl", [_request(1.0, 0, 1.0)] * 3), 0.0, 2.0)
    other = summarize(_write(tmp_path / "b.jsonl", [_request(1.0, 0, 2.0)]), 0.0, 2.0)
    both = pooled([one, other])
    assert both["stages"]["sand"]["requests"] == 4
    assert both["stages"]["sand"]["engine_queue_s"] == pytest.approx((3 * 1.0 + 2.0) / 4)


def test_a_request_that_reaches_vllm_during_a_step_waits_for_its_end(tmp_path: Path) -> None:
    steps = [_step(10.0, 200.0, 1000, 1, 0), _step(10.5, 100.0, 0, 2, 0)]  # 9.8-10.0 and 10.4-10.5

    def reaching(submitted: float, stage: float) -> dict:
        return {
            **_request(submitted - 0.01, 0, 0.0),
            "vllm_input_s": stage,
            "engine_queued": submitted + stage,
            "prompt_tokens": 100,
        }

    requests = [
        reaching(9.9, 0.1),  # waits for the first step's last 0.1 s
        reaching(10.2, 0.001),  # between steps
        reaching(10.45, 0.03),  # in the second step, taken in before its logged end: the whole stage
        {**reaching(9.9, 0.1), "engine_queued": math.nan},  # no engine times
    ]
    waits = step_in_progress_waits(requests, steps)
    assert waits[:3] == pytest.approx([0.1, 0.0, 0.03]) and math.isnan(waits[3])
    stages = summarize(_write(tmp_path / "run.jsonl", [*steps, *requests]), 9.0, 11.0)["stages"]
    assert stages["sand"][STEP_IN_PROGRESS] == pytest.approx(0.13 / 3)


def test_the_machine_speed_is_the_median_step_decoding_one_request_alone(tmp_path: Path) -> None:
    speeds = [4.0] * 15 + [5.0] + [9.0] * 15
    assert len(speeds) == MIN_LONE_DECODE_STEPS + 1
    lone = [_step(0.1 * i, ms, 0, 1, 0) for i, ms in enumerate(speeds)]
    others = [
        _step(5.0, 1.0, 0, 2, 0),  # two decoding
        _step(6.0, 2.0, 100, 1, 0),  # a prefill beside the decode
        {**_step(7.0, 3.0, 0, 1, 0), "encoder_inputs": 1},  # an encoder run beside it
        {"kind": "step", "t": 8.0, "running": 0, "waiting": 0, "kv": 0.0, "preempted": 0},  # untimed
    ]
    path = _write(tmp_path / "run.jsonl", [*lone, *others])
    engine = summarize(path, 0.0, 10.0)["engine"]
    assert engine["lone_decode_step_ms"] == 5.0 and engine["lone_decode_steps"] == len(speeds)
    # Too few such steps (a backlogged run's lulls) measure nothing.
    few = _write(tmp_path / "few.jsonl", [*lone[:10], *others])
    assert math.isnan(summarize(few, 0.0, 10.0)["engine"]["lone_decode_step_ms"])


def _records(rows: list[tuple[float, float, float, int, int]]) -> RequestRecords:
    """Load-client records from (arrival, first token, finish, output tokens, level) rows."""
    arrival, first, finish, tokens, level = (np.array(column) for column in zip(*rows, strict=True))
    return RequestRecords(arrival, first, finish, tokens.astype(int), np.zeros(len(rows), dtype=int), level)


def test_a_token_costs_the_steps_it_decoded_through_by_what_they_ran(tmp_path: Path) -> None:
    steps = [
        {**_step(10.1, 300.0, 0, 2, 0), "encoder_inputs": 1},  # an image's encoder beside two decodes
        _step(10.2, 150.0, 2048, 2, 0),  # a prompt chunk beside them
        _step(10.3, 10.0, 0, 2, 0),
        _step(10.4, 10.0, 0, 1, 0),
        _step(20.0, 999.0, 2048, 0, 0),  # after every answer
    ]
    path = _write(tmp_path / "run.jsonl", steps)
    requests = _records([
        (0.0, 0.05, 1.05, 5, 0),  # a sand answer through all four steps: 4 tokens after its first
        (0.1, 0.15, 0.35, 3, 2),  # a rock's through the chunk and one decode
        (0.2, 0.25, 0.25, 1, 0),  # one token: no time per output token
        (0.3, 0.35, math.nan, 9, 0),  # unfinished
    ])  # fmt: skip
    # The window holds no step: the parts take every step of the log.
    parts = summarize(path, 0.0, 1.0, requests, origin_s=10.0)["token_parts"]
    assert set(parts) == {"sand", "rocks"} and parts["sand"]["requests"] == 1
    sand, rocks = parts["sand"], parts["rocks"]
    assert (sand["encoder_ms"], sand["prefill_ms"], sand["decode_ms"]) == pytest.approx((75.0, 37.5, 5.0))
    assert sand["between_ms"] == pytest.approx((1000.0 - 470.0) / 4) and sand["decoding"] == 1.75
    assert (rocks["encoder_ms"], rocks["prefill_ms"], rocks["decode_ms"]) == pytest.approx((0.0, 75.0, 5.0))
    assert rocks["tpot_ms"] == pytest.approx(1000 * (0.35 - 0.15) / 2)
    # Pooled with a run of three such rocks, each class weighs its runs by their requests.
    more = summarize(path, 0.0, 1.0, _records([(0.1, 0.15, 0.35, 3, 2)] * 3), origin_s=10.0)
    both = pooled([summarize(path, 0.0, 1.0, requests, origin_s=10.0), more])["token_parts"]
    assert both["rocks"]["requests"] == 4 and both["sand"]["requests"] == 1
    assert both["rocks"]["prefill_ms"] == pytest.approx(75.0)


def _engine_request(arrival: float, level: int, first_token: float, prompt_tokens: int) -> dict:
    """A request whose engine core queued it at `arrival` and gave it its first token at `first_token`."""
    return {**_request(arrival, level, 0.0), "engine_queued": arrival, "prefill_s": first_token - arrival,
            "prompt_tokens": prompt_tokens}  # fmt: skip


def test_a_first_token_is_charged_to_the_first_step_logged_after_it(tmp_path: Path) -> None:
    steps = [
        {**_step(10.000, 200.0, 1500, 2, 0), "prefill_requests": 2},  # logged 3 ms after its first token
        {**_step(10.300, 400.0, 900, 2, 0), "encoder_inputs": 1},
        _step(10.500, 60.0, 600, 2, 0),  # a prefill alone beside decodes
        _step(11.000, 250.0, 2048, 2, 0),
        _step(11.500, 10.0, 0, 2, 0),
    ]
    requests = [
        _engine_request(9.5, 0, 9.997, 600),
        _engine_request(9.6, 0, 10.299, 300),
        _engine_request(9.7, 0, 10.499, 600),
        _engine_request(9.8, 2, 10.9, 4000),
        {**_engine_request(9.9, 0, 10.2, 50), "engine_queued": math.nan},  # no engine times: left out
        _engine_request(9.95, 0, 12.0, 50),  # no step logged after its first token: left out
        _engine_request(8.5, 0, 10.298, 200),  # before the window, but beside the second sand
    ]
    path = _write(tmp_path / "run.jsonl", [*steps, *requests])
    # Requests by arrival in the window; steps from the whole log.
    run = summarize(path, 9.0, 10.0)
    sand, rocks = run["first_token_steps"]["sand"], run["first_token_steps"]["rocks"]
    assert sand["requests"] == 3 and rocks["requests"] == 1
    assert sand["prefill_s"] == pytest.approx((0.497 + 0.699 + 0.799) / 3)
    assert sand["step_s"] == pytest.approx((0.2 + 0.4 + 0.06) / 3)
    assert sand["step_tokens"] == pytest.approx((1500 + 900 + 600) / 3)
    assert sand["own_tokens"] == pytest.approx(500) and sand["encoder"] == pytest.approx(1 / 3)
    assert sand["sand_beside_tokens"] == pytest.approx(200 / 3) and rocks["sand_beside_tokens"] == 0
    assert sand["alone"] == pytest.approx(1 / 3) and sand["alone_step_s"] == pytest.approx(0.06)
    assert rocks["alone"] == 1.0 and rocks["alone_step_s"] == pytest.approx(0.25)
    assert math.isnan(sand["other_encoder"])  # the records do not say whose encoder ran
    # Pooled with a run of one sand alone in a 160 ms step: the alone steps weigh by their requests.
    other = _write(
        tmp_path / "other.jsonl", [_step(10.5, 160.0, 600, 0, 0), _engine_request(9.5, 0, 10.499, 600)]
    )
    both = pooled([run, summarize(other, 9.0, 10.0)])["first_token_steps"]["sand"]
    assert both["requests"] == 4 and both["alone"] == pytest.approx(0.5)
    assert both["alone_step_s"] == pytest.approx((0.06 + 0.16) / 2)


def test_an_encoder_is_anothers_where_the_step_ran_more_inputs_than_the_requests_own(tmp_path: Path) -> None:
    steps = [
        {**_step(10.0, 100.0, 600, 0, 0), "encoder_inputs": 1},
        {**_step(11.0, 100.0, 600, 0, 0), "encoder_inputs": 2},
        {**_step(12.0, 100.0, 600, 0, 0), "encoder_inputs": 1},
    ]
    requests = [
        {**_engine_request(9.5, 0, 9.99, 600), "media_inputs": 1},  # its own image's encoder alone
        {**_engine_request(9.6, 0, 10.99, 600), "media_inputs": 1},  # its own and another's
        {**_engine_request(9.7, 0, 11.99, 600), "media_inputs": 0},  # a text beside another's
    ]
    run = summarize(_write(tmp_path / "run.jsonl", [*steps, *requests]), 9.0, 10.0)
    sand = run["first_token_steps"]["sand"]
    assert sand["encoder"] == 1.0 and sand["other_encoder"] == pytest.approx(2 / 3)


def test_the_engine_run_takes_the_engine_cores_times_and_counts_steps_as_early_as_they_can_start() -> None:
    request = {"kind": "request", "t": 5.0, "arrival": 1.0, "level": 2, "engine_queued": 1.1,
               "prompt_tokens": 300, "engine_queue_s": 0.2, "prefill_s": 0.5,
               "to_first_token_s": 0.95}  # fmt: skip
    untimed = request | {"engine_queued": math.nan}  # an engine that reported no timestamps: left out
    steps = [_step(1.5, 100, 200, 1, 0), _step(1.7, 100, 100, 1, 0), _step(1.75, 10, 0, 1, 0)]
    run = engine_run([request, untimed, *steps], token_budget=256, light_budget=128)
    assert list(run.queued_s) == [1.1] and list(run.prompt_tokens) == [300] and list(run.level) == [2]
    assert run.scheduled_s[0] == pytest.approx(1.3) and run.first_token_s[0] == pytest.approx(1.8)
    # The first token reached vllm_model 0.15 s after the engine took it: every step may have started
    # that much before its logged end less its time, and no later than a step after it.
    assert list(run.step_end_s) == [1.5, 1.7, 1.75]
    assert run.step_start_s == pytest.approx([1.25, 1.45, 1.59])
    assert list(run.step_decodes) == [1, 1, 1] and run.step_free_tokens is None


def test_a_class_tail_is_its_slowest_first_tokens_and_the_steps_they_waited_for(tmp_path: Path) -> None:
    steps = [
        {**_step(10.0, 600.0, 2048, 1, 0), "encoder_inputs": 1},  # 9.4-10.0: a video's encoder and chunk
        _step(10.1, 100.0, 500, 1, 0),
        _step(10.2, 50.0, 400, 1, 0),
        {**_step(10.5, 50.0, 300, 1, 0), "encoder_inputs": 2},  # 10.45-10.5
        {**_step(10.6, 80.0, 300, 1, 0), "encoder_inputs": 1},
        _step(10.8, 20.0, 100, 1, 0),
    ]

    def sand(submitted: float, stage: float, queue: float, prefill: float, media: int | None) -> dict:
        """A sand request that reached vLLM at `submitted` and the engine core `stage` later."""
        record = {**_request(submitted - 0.01, 0, queue), "vllm_input_s": stage,
                  "engine_queued": submitted + stage, "prefill_s": prefill, "prompt_tokens": 100,
                  "media_inputs": media}  # fmt: skip
        record["to_first_token_s"] = 0.01 + stage + queue + prefill
        if media is None:
            del record["media_inputs"]
        return record

    requests = [
        sand(9.5, 0.5, 0.0, 0.099, 0),  # waited for the encoder step; first token in the next step
        sand(10.12, 0.01, 0.02, 0.049, 0),  # between steps
        sand(10.46, 0.04, 0.0, 0.09, 1),  # waited for a step of others' encoders; then its own encoder
        sand(10.7, 0.01, 0.03, 0.06, 0),
        {**sand(9.6, 0.4, 0.0, 0.6, 0), "engine_queued": math.nan},  # no engine times: left out
        {**sand(9.55, 0.45, 0.0, 0.599, None), "level": 2},  # a rock: its own class; whose encoder unknown
    ]
    half = first_token_tail(requests, steps, share=0.5)
    assert half["sand"]["requests"] == 2  # the two slowest of four
    assert half["sand"]["to_first_token_s"] == pytest.approx((0.609 + 0.14) / 2)
    assert half["sand"][STEP_IN_PROGRESS] == pytest.approx((0.5 + 0.04) / 2)
    assert half["sand"]["prefill_s"] == pytest.approx((0.099 + 0.09) / 2)
    assert half["sand"]["in_progress_step_s"] == pytest.approx((0.6 + 0.05) / 2)
    assert half["sand"]["in_progress_encoder"] == 1.0
    assert half["sand"]["first_token_step_s"] == pytest.approx((0.1 + 0.08) / 2)
    assert half["sand"]["other_encoder"] == 0.0  # the second ran its own image's encoder alone
    whole = first_token_tail(requests, steps, share=1.0)["sand"]
    assert whole["requests"] == 4 and whole["in_progress_encoder"] == pytest.approx(2 / 4)
    rocks = half["rocks"]
    assert rocks["requests"] == 1 and rocks["in_progress_step_s"] == pytest.approx(0.6)
    assert math.isnan(rocks["other_encoder"])
    # The default tail, a fifth (at least one), in the run's summary and pooled with itself.
    run = summarize(_write(tmp_path / "run.jsonl", [*steps, *requests]), 9.0, 11.0)
    tail = pooled([run, run])["first_token_tail"]["sand"]
    assert tail["requests"] == 2 and tail["to_first_token_s"] == pytest.approx(0.609)
    assert run["first_token_tail"]["sand"]["in_progress_step_s"] == pytest.approx(0.6)
