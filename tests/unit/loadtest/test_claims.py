"""The record of a comparison's claims and the two pages generated from the records."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.cli import claims as claims_cli
from rps_harness.comparison import ratio_rows
from rps_harness.loadtest.claims import (
    CAPACITY_MARK,
    CAPACITY_NOTE,
    DIRTY_MARK,
    PAGE_LINES,
    WORD_TEXTS_LABEL,
    WORD_TEXTS_NOTE,
    claim_record,
    claims_page,
    commit_of,
    log_page,
    trace_texts,
    vector_extension,
)
from rps_harness.metrics import RequestRecords
from rps_harness.workload.prompts import TRACE_TEXTS
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


TEXT_P90_TARGET = ("target rps / fcfs text P90 TTFT <= 0.75x",)


def _summary(recorded_rps: float, targets: tuple[str, ...] = TEXT_P90_TARGET) -> dict:
    ratios = ratio_rows({"fcfs": _runs(1.0), "vllm-priority": _runs(1.0), "rps": _runs(recorded_rps)}, "rps")
    tally = {"sent": 600, "completed": 600, "refused": 0, "failed": 0, "lost": 0}
    return {
        "plan": ["plan, fixed before the first run: 3 seeds"],
        "config": {
            "mix": "cost-vs-modality",
            "policies": ["fcfs", "vllm-priority", "rps"],
            "repeats": 3,
            "requests": 200,
        },
        "open_loop": {"described": "2.00 req/s open loop, below 2.50 (2.50/s unbounded, 2.00/s bounded)"},
        "loads": [
            {
                "rate": 1.8,
                "fraction": 0.9,
                "capacity_bracketed": True,
                "results": {p: {"requests": tally} for p in ("fcfs", "vllm-priority", "rps")},
                "rps_ratios": {
                    b: {m: {**asdict(r), "verdict": r.verdict()} for m, r in row.items()}
                    for b, row in ratios.items()
                },
                # as demo_report.target_lines writes them: the ratio after the colon is not read back
                "targets": [f"{target}: ..." for target in targets]
                + ["rps: longest video TTFT per run (s): 1.0"],
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


def test_the_record_keeps_where_each_policys_first_tokens_spent_their_time() -> None:
    summary = _summary(0.5)
    stages, tail = {"sand": {"requests": 3.0, "prefill_s": 0.1}}, {"sand": {"requests": 1.0}}
    analysis = {"stages": stages, "first_token_tail": tail, "engine": {"steps": 7.0}}
    summary["loads"][0]["results"]["rps"]["analysis"] = analysis
    (load,) = claim_record(summary, "rps", ["rps-serve"])["loads"]
    # The engine's summary stays in demo.json; a run without an analysis has none to keep.
    assert load["analysis"] == {"rps": {"stages": stages, "first_token_tail": tail}}


def test_a_record_says_how_its_texts_were_sized_and_older_ones_read_as_word_texts() -> None:
    """Texts have their trace's tokens since `trace_texts` was recorded; the runs recorded before sent
    texts ~1.34x longer, and are told apart by the field's absence."""
    assert trace_texts(claim_record(_summary(0.5), "rps", ["rps-serve"])) == TRACE_TEXTS == "tokens"
    assert trace_texts({"recorded": "2026-12-06 01:36 UTC"}) == "words"


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


def _record(
    recorded_rps: float, when: str, command: str = "demo", targets: tuple[str, ...] = TEXT_P90_TARGET
) -> dict:
    summary = _summary(recorded_rps, targets)
    return claim_record(summary, "rps", ["rps-serve", *shlex.split(command)]) | {"recorded": when}


def test_the_log_shows_every_ratio_with_its_interval_and_n_newest_first() -> None:
    older = _record(0.5, "2026-12-01 10:00 UTC")
    newer = _record(1.0, "2026-12-04 10:00 UTC")
    page = log_page({"runs/older.json": older, "runs/newer.json": newer})
    assert page.index("2026-12-04 10:00 UTC") < page.index("2026-12-01 10:00 UTC")
    newer_row, older_row = [line for line in page.splitlines() if line.startswith("| text P90 TTFT |")]
    assert older_row == "| text P90 TTFT | 0.50x [0.50, 0.50] n=3 | 0.50x [0.50, 0.50] n=3 |"
    assert newer_row.startswith("| text P90 TTFT | 1.00x [1.00, 1.00] n=3 = |")  # identical runs
    assert "| video P99 TTFT | not measured (seed 0: " in page  # 20 videos a seed: P99 needs 300
    assert "- target rps / fcfs text P90 TTFT <= 0.75x" in page
    assert "fcfs 600/600 completed, 0 refused, 0 failed, 0 lost" in page
    assert "record: [runs/newer.json](runs/newer.json)" in page


def test_the_claims_page_holds_each_claims_latest_run_in_one_row() -> None:
    older = _record(0.5, "2026-12-01 10:00 UTC")
    newer = _record(1.0, "2026-12-04 10:00 UTC")
    smaller_cache = _record(
        0.5, "2026-12-02 10:00 UTC", "demo --engine-args '{\"num_gpu_blocks_override\": 96}'"
    )
    # Another model repository is another configuration (its model.json), even when run later.
    other_repository = _record(0.5, "2026-12-05 10:00 UTC", "demo --repository repo-nohold")
    # So is a candidate that runs a policy with other scheduler settings (a served variant).
    variant = {**_record(0.5, "2026-12-06 10:00 UTC", "demo --policies rps-cap"), "candidate": "rps-cap"}
    page = claims_page(
        {
            "runs/older.json": older,
            "runs/newer.json": newer,
            "runs/kv.json": smaller_cache,
            "runs/nohold.json": other_repository,
            "runs/variant.json": variant,
        }
    )
    rows = [line for line in page.splitlines() if line.startswith("| cost-vs-modality")]
    assert [row.replace(DIRTY_MARK, "D") for row in rows] == [
        "| cost-vs-modality at 0.9x | rps / fcfs | text P90 TTFT | <= 0.75x | 1.00x [1.00, 1.00] | 3 "
        f"| not met | 1.80 req/s | {_run_cell(1)} |",
        "| cost-vs-modality at 0.9x, chunk_cap_tokens 2048 | rps / fcfs | text P90 TTFT | <= 0.75x "
        f"| 0.50x [0.50, 0.50] | 3 | met | 1.80 req/s | {_run_cell(2)} |",
        "| cost-vs-modality at 0.9x, num_gpu_blocks_override 96 | rps / fcfs | text P90 TTFT | <= 0.75x "
        f"| 0.50x [0.50, 0.50] | 3 | met | 1.80 req/s | {_run_cell(3)} |",
        "| cost-vs-modality at 0.9x, repository repo-nohold | rps / fcfs | text P90 TTFT | <= 0.75x "
        f"| 0.50x [0.50, 0.50] | 3 | met | 1.80 req/s | {_run_cell(4)} |",
    ]
    runs = [line for line in page.splitlines() if line.startswith("- r")]
    assert runs[2].startswith("- r3: [2026-12-02 10:00](runs/kv.json), `")
    assert runs[2].endswith(": `rps-serve demo --engine-args '{\"num_gpu_blocks_override\": 96}'`")
    assert "[the run log](log.md)" in page


def _run_cell(number: int) -> str:
    """The run column as this checkout's records write it: dirty while its tree has changes."""
    return f"r{number}" + (", D" if commit_of(CHECKOUT).endswith("-dirty") else "")


def _with(
    record: dict, commit: str = "abc123", rate: float = 1.8, bracketed: bool = True, **fields: Any
) -> dict:
    """`record` from `commit`, its load at `rate` (0.9x of the capacity searched) and its capacity
    search's probes in `fields["capacity"]`."""
    (load,) = record["loads"]
    return (
        record
        | {"commit": commit, "loads": [load | {"rate": rate, "capacity_bracketed": bracketed}]}
        | fields
    )


def test_each_row_names_its_load_and_its_runs_machine_commit_capacity_and_command() -> None:
    record = _with(_record(0.5, "2026-12-06 10:00 UTC"), commit="abc123")
    record["machine"] = {"cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.5, "vector": "AVX-512"}
    page = claims_page({"runs/run.json": record})
    (row,) = [line for line in page.splitlines() if line.startswith("| cost-vs-modality")]
    assert row.endswith("| met | 1.80 req/s | r1 |")
    assert (
        "- r1: [2026-12-06 10:00](runs/run.json), `abc123`, AMD EPYC (2 cores, AVX-512), capacity 2.00 to "
        "2.50 req/s (no usual: too few records): `rps-serve demo`"
    ) in page


def test_a_dirty_commit_and_an_unbracketed_capacity_are_marked_in_the_row() -> None:
    dirty = _with(_record(0.5, "2026-12-06 10:00 UTC"), commit="abc123-dirty", bracketed=False)
    (row,) = [
        line for line in claims_page({"runs/run.json": dirty}).splitlines() if line.startswith("| cost")
    ]
    assert row.endswith("| 1.80 req/s (unbracketed) | r1, dirty |")


def test_a_capacity_off_its_workloads_usual_by_more_than_the_spread_is_marked() -> None:
    def run(day: int, low: float, high: float) -> dict:
        probes = f"{low:.2f} req/s open loop, below {high:.2f} ({high:.2f}/s unbounded, {low:.2f}/s bounded)"
        return _with(_record(0.5, f"2026-12-0{day} 10:00 UTC"), rate=0.9 * low, capacity=probes)

    usual = {f"runs/{day}.json": run(day, 2.0 + 0.05 * day, 2.5 + 0.05 * day) for day in range(1, 5)}
    slow = run(5, 1.0, 1.2)  # the latest run: its row is on the page
    page = claims_page({**usual, "runs/5.json": slow})
    (row,) = [line for line in page.splitlines() if line.startswith("| cost-vs-modality")]
    assert row.endswith(f"| r1, {CAPACITY_MARK} |")
    assert CAPACITY_NOTE in page
    assert "capacity 1.00 to 1.20 req/s (usual 2.10 ± 0.07)" in page
    # Within the spread, or a workload of fewer records than make a spread: no mark.
    page = claims_page({**usual, "runs/5.json": run(5, 2.1, 2.6)})
    assert CAPACITY_MARK not in page
    assert CAPACITY_MARK not in claims_page({"runs/1.json": usual["runs/1.json"], "runs/5.json": slow})


def test_runs_with_texts_sized_in_words_keep_their_own_marked_claims() -> None:
    old = {k: v for k, v in _record(0.5, "2026-12-01 10:00 UTC").items() if k != "trace_texts"}
    new = _record(1.0, "2026-12-04 10:00 UTC")
    page = claims_page({"runs/old.json": old, "runs/new.json": new})
    rows = [line for line in page.splitlines() if line.startswith("| cost-vs-modality")]
    assert [row.split(" | ")[0] for row in rows] == [
        "| cost-vs-modality at 0.9x",
        f"| cost-vs-modality at 0.9x ({WORD_TEXTS_LABEL})",
    ]
    assert rows[0].endswith(_run_cell(1).replace("D", DIRTY_MARK) + " |")
    assert rows[1].endswith(_run_cell(2).replace("D", DIRTY_MARK) + " |")
    assert (
        "- r1: [2026-12-04 10:00](runs/new.json)" in page
        and "- r2: [2026-12-01 10:00](runs/old.json)" in page
    )
    assert WORD_TEXTS_NOTE in page
    assert WORD_TEXTS_NOTE not in claims_page({"runs/new.json": new})
    assert f"- request texts: {WORD_TEXTS_NOTE}" in log_page({"runs/old.json": old})


def test_a_withdrawn_target_says_why_and_a_refused_one_says_why_not() -> None:
    targets = (
        "target rps / vllm-priority short-text P90 TTFT <= 0.8x",  # withdrawn for cost-vs-modality
        "target rps / fcfs video P99 TTFT <= 0.9x",
    )
    page = claims_page({"runs/run.json": _record(0.5, "2026-12-06 10:00 UTC", targets=targets)})
    refused, withdrawn = [line for line in page.splitlines() if line.startswith("| cost-vs-modality")]
    assert "| short-text P90 TTFT | <= 0.8x | (seed 0: 0 values, " in withdrawn
    assert withdrawn.replace(DIRTY_MARK, "D").endswith(f"| 3 | withdrawn | 1.80 req/s | {_run_cell(1)} |")
    assert "values, video P99 TTFT needs 300) | 3 | not measured |" in refused
    assert "- cost-vs-modality at 0.9x, short-text P90 TTFT against vllm-priority: the demo's runs" in page


def test_the_command_writes_both_pages_linked_to_each_other_and_the_records(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    record = tmp_path / "runs" / "run.json"
    record.write_text(json.dumps(_record(0.5, "2026-12-06 10:00 UTC")))
    out = tmp_path / "README.md"
    claims_cli.run(argparse.Namespace(records=[record], out=out, log=None))
    assert "[the run log](log.md)" in out.read_text()
    assert "](runs/run.json)" in out.read_text()
    log = (tmp_path / "log.md").read_text()
    assert "[The claims page](README.md)" in log and "record: [runs/run.json](runs/run.json)" in log


def _committed_records() -> dict[str, dict]:
    """The records as `make claims` links them from the pages beside runs/."""
    return {
        f"runs/{path.name}": json.loads(path.read_text())
        for path in sorted((RESULTS / "runs").glob("*.json"))
    }


def test_both_pages_are_what_their_command_writes() -> None:
    records = _committed_records()
    assert (RESULTS / "README.md").read_text() == claims_page(records), "regenerate it: make claims"
    assert (RESULTS / "log.md").read_text() == log_page(records), "regenerate it: make claims"


def test_the_claims_page_fits_one_screen() -> None:
    lines = (RESULTS / "README.md").read_text().splitlines()
    assert len(lines) <= PAGE_LINES, f"{len(lines)} lines: the claims page holds one row per claim, no more"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert commit_of(tmp_path) == "unknown"
