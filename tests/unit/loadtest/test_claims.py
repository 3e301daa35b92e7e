"""The record of a comparison's claims and the page generated from the records."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from rps_serve.comparison import ratio_rows
from rps_serve.loadtest.claims import claim_record, claims_page, commit_of, vector_extension
from rps_serve.metrics import RequestRecords
from rps_serve.requests import Modality
from tests.checkout import CHECKOUT

RESULTS = CHECKOUT / "docs" / "results"


def _runs(text_scale: float, seeds: int = 3) -> list[RequestRecords]:
    runs = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        ttft = rng.exponential(1.0, 200)
        modality = np.where(np.arange(200) % 10 == 0, Modality.VIDEO.index, Modality.TEXT.index)
        ttft = np.where(modality == Modality.TEXT.index, ttft * text_scale * rng.uniform(0.9, 1.1), ttft)
        arrival = np.arange(200, dtype=float)
        runs.append(
            RequestRecords(
                arrival, arrival + ttft, arrival + ttft + 1.0, np.full(200, 11), modality, np.zeros(200, int)
            )
        )
    return runs


def _summary(recorded_rps: float) -> dict:
    ratios = ratio_rows({"fcfs": _runs(1.0), "rps": _runs(recorded_rps)}, "rps")
    tally = {"sent": 600, "completed": 600, "refused": 0, "failed": 0, "lost": 0}
    return {
        "plan": ["plan, fixed before the first run: 3 seeds"],
        "config": {"mix": "cost-vs-modality", "policies": ["fcfs", "rps"], "repeats": 3, "requests": 200},
        "open_loop": {"described": "2.00 req/s open loop, below 2.50"},
        "loads": [
            {
                "rate": 1.8,
                "fraction": 0.9,
                "capacity_bracketed": True,
                "results": {"fcfs": {"requests": tally}, "rps": {"requests": tally}},
                "rps_ratios": {
                    b: {m: {**asdict(r), "verdict": r.verdict()} for m, r in row.items()}
                    for b, row in ratios.items()
                },
                "targets": ["target rps / fcfs text P90 TTFT <= 0.75x: 0.50x [0.45, 0.55] n=3 met"],
            }
        ],
    }


def test_the_record_names_where_when_and_how() -> None:
    record = claim_record(_summary(0.5), "rps", ["rps-serve", "demo", "--mix", "cost-vs-modality"])
    assert record["command"] == "rps-serve demo --mix cost-vs-modality"
    assert record["commit"] == commit_of(CHECKOUT) != ""
    assert record["machine"]["cores"] >= 1 and record["machine"]["cpu"]
    assert record["seeds"] == 3 and record["mix"] == "cost-vs-modality"
    (load,) = record["loads"]
    assert load["ratios"]["fcfs"]["text P90 TTFT"]["verdict"] == "faster"


def test_the_machine_names_its_widest_vector_extension() -> None:
    assert claim_record(_summary(0.5), "rps", ["rps-serve"])["machine"]["vector"] in {
        "AMX",
        "AVX-512",
        "AVX2",
        "none",
    }
    flags = "flags\t\t: fpu sse2 avx2 avx512f avx512bw"
    assert vector_extension(["processor\t: 0", flags]) == "AVX-512"
    assert vector_extension([flags.replace(" avx512f avx512bw", "")]) == "AVX2"
    assert vector_extension([flags + " amx_tile"]) == "AMX"
    assert vector_extension(["flags\t\t: fpu sse2"]) == vector_extension([]) == "none"


def test_the_page_shows_every_ratio_with_its_interval_and_n_newest_first() -> None:
    older = claim_record(_summary(0.5), "rps", ["rps-serve", "demo"]) | {"recorded": "2026-12-01 10:00 UTC"}
    newer = claim_record(_summary(1.0), "rps", ["rps-serve", "demo"]) | {"recorded": "2026-12-04 10:00 UTC"}
    page = claims_page([older, newer])
    assert page.index("2026-12-04 10:00 UTC") < page.index("2026-12-01 10:00 UTC")
    newer_row, older_row = [line for line in page.splitlines() if line.startswith("| text P90 TTFT |")]
    assert older_row == "| text P90 TTFT | 0.50x [0.50, 0.50] n=3 |"
    assert newer_row == "| text P90 TTFT | 1.00x [1.00, 1.00] n=3 = |"  # identical runs: no difference
    assert "| video P99 TTFT | not measured (seed 0: " in page  # 20 videos a seed: P99 needs 300
    assert "- target rps / fcfs text P90 TTFT <= 0.75x" in page
    assert "fcfs 600/600 completed, 0 refused, 0 failed, 0 lost" in page


def test_the_claims_page_is_what_its_command_writes() -> None:
    records = sorted((RESULTS / "runs").glob("*.json"))
    page = RESULTS / "README.md"
    expected = claims_page([json.loads(path.read_text()) for path in records])
    assert page.read_text() == expected, "regenerate it: make claims"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert commit_of(tmp_path) == "unknown"
