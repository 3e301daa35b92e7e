"""Observed prefill costs from a real vLLM engine under the RPS scheduler: one record per completed
prefill, with the request's own token counts and its share of the steps that ran it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rps_serve.profiles.records import read_records
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.classify import engine_request_features
from tests.e2e.engine.conftest import make_engine, scheduler_of

REQUESTS = {
    "video": (Modality.VIDEO, 20),
    "image": (Modality.IMAGE, 20),
    "long text": (Modality.TEXT, 300),
    "text": (Modality.TEXT, 10),
}


def test_every_prefill_is_recorded_once_with_its_share_of_the_steps(
    tiny_model: Path, driver_for: Any, tmp_path: Path
) -> None:
    log = tmp_path / "observed.jsonl"
    # 128-token chunks: the long prefills span steps, each shared with the others' chunks and decodes.
    engine = make_engine(tiny_model, Policy.RPS, max_num_batched_tokens=128, rps={"observed_costs": str(log)})
    driver = driver_for(engine)
    for request_id, (modality, words) in REQUESTS.items():
        driver.submit(request_id, modality, words=words, max_tokens=16)
    scheduler = scheduler_of(engine)
    expected = {engine_request_features(r) for r in scheduler.requests.values()}
    started = time.perf_counter()
    driver.run()
    elapsed = time.perf_counter() - started
    # One engine aborted mid-prefill leaves nothing behind in the observer either.
    driver.submit("aborted", Modality.VIDEO)
    driver.advance()
    engine.abort_request(["aborted"])
    driver.advance()
    assert scheduler._costs.observer.open_requests == 0

    records = list(read_records(log))
    assert {r.features for r in records} == expected and len(records) == len(REQUESTS)
    assert all(r.under_load and r.prefill_s > 0 and r.encoder_s == 0 for r in records)
    # Shares of steps that all ran inside the drive, none counted twice.
    assert sum(r.prefill_s for r in records) < elapsed
