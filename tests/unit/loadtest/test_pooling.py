"""Several runs of one policy as one: server-side stages weighted by requests, tallies added up, and
the ratio table with its intervals and verdicts."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rps_harness.client import Tally
from rps_harness.comparison import ratio_rows
from rps_harness.loadtest.demo import (
    DemoConfig,
    arrivals_ahead,
    engine_settings,
    keep_run,
    read_kept_runs,
    run_order,
    run_plan,
)
from rps_harness.loadtest.demo_analysis import CANDIDATE, candidate_of
from rps_harness.loadtest.demo_records import LoadRuns, PolicyRun
from rps_harness.loadtest.demo_report import fit_lines, machine_speed_lines, target_lines, wait_lines
from rps_harness.loadtest.load import BenchRun
from rps_harness.loadtest.server_stats import ServedFit
from rps_harness.loadtest.stages import pooled_stages
from rps_harness.loadtest.tables import ratio_table
from rps_harness.local.repository import train_reference_cost_models
from rps_harness.metrics import RequestRecords
from rps_serve.cost.runtime import REPORT_FILE
from rps_serve.cost.training import fit_of_report
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality
from rps_serve.triton.settings import ENGINE_ARGS_ENV, SETTINGS_FILE, read_settings
from tests.checkout import REPOSITORY


def _stages(requests: float, queue: float, work: float, first_token: float) -> dict[str, float | None]:
    return {
        "requests": requests,
        "front_end_queue_s": queue,
        "front_end_work_s": work,
        "to_first_token_s": first_token,
        "engine_s": first_token - queue - work,
    }


def test_stages_are_weighted_by_the_requests_of_each_run() -> None:
    empty = {
        "requests": 0.0,
        **dict.fromkeys(("front_end_queue_s", "front_end_work_s", "to_first_token_s", "engine_s")),
    }
    runs = [
        {"sand": _stages(30, 0.01, 0.02, 0.5), "pebbles": empty, "rocks": empty},
        {"sand": _stages(10, 0.05, 0.02, 0.9), "pebbles": _stages(4, 0.1, 0.1, 2.0), "rocks": empty},
    ]
    pooled = pooled_stages(runs)
    assert pooled["sand"]["requests"] == 40
    assert pooled["sand"]["to_first_token_s"] == pytest.approx((30 * 0.5 + 10 * 0.9) / 40)
    assert pooled["sand"]["front_end_queue_s"] == pytest.approx((30 * 0.01 + 10 * 0.05) / 40)
    assert pooled["pebbles"]["engine_s"] == pytest.approx(1.8)
    assert pooled["rocks"] == {
        "requests": 0.0,
        **dict.fromkeys(("front_end_queue_s", "front_end_work_s", "to_first_token_s", "engine_s")),
    }


def test_tallies_add_up() -> None:
    total = Tally.total([Tally(10, 8, 1, 1, 0), Tally(5, 3, 0, 1, 1)])
    assert total == Tally(15, 11, 1, 2, 1)


def _records(text_ttft: np.ndarray, video_ttft: np.ndarray) -> RequestRecords:
    ttft = np.concatenate([text_ttft, video_ttft])
    modality = np.array([Modality.TEXT.index] * len(text_ttft) + [Modality.VIDEO.index] * len(video_ttft))
    n = len(ttft)
    return RequestRecords(
        arrival_s=np.arange(n, dtype=float),
        first_token_s=np.arange(n) + ttft,
        finish_s=np.arange(n) + ttft + 1.0,
        output_tokens=np.full(n, 11),
        modality=modality,
        level=(modality == Modality.VIDEO.index).astype(int),  # videos are pebbles
    )


def test_the_ratio_table_shows_each_interval_and_marks_those_that_include_one() -> None:
    rng = np.random.default_rng(0)
    fcfs, rps = [], []
    for _ in range(3):
        text, video = rng.exponential(1.0, 200), rng.exponential(2.0, 40)
        fcfs.append(_records(text, video))
        rps.append(_records(text / 2, video * rng.uniform(0.9, 1.1, 40)))  # text twice as fast
    ratios = ratio_rows({"fcfs": fcfs, "rps": rps}, "rps")
    table = ratio_table(ratios, "rps")
    rows = {line[:22].strip(): line for line in table.splitlines()}
    text_p90 = ratios["fcfs"]["text P90 TTFT"]
    assert str(text_p90) in rows["text P90 TTFT"] and text_p90.verdict() == "faster"
    assert "n=3" in str(text_p90)
    video = ratios["fcfs"]["video mean TTFT"]
    assert video.verdict() == "no difference measured"
    assert f"{video} =" in rows["video mean TTFT"]
    # A few dozen videos a steady window: P99 is refused, and the table says why.
    assert rows["video P99 TTFT"].split()[-2:] == ["not", "measured"]
    assert "not measured, video P99 TTFT: seed 0: 16 values, video P99 TTFT needs 300" in table
    assert "rps / fcfs text P90 TTFT, each seed alone: 0.50x, 0.50x, 0.50x" in table
    assert ratio_table({}, "rps") == ""


def test_targets_are_met_only_where_the_whole_interval_is(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    runs: dict[str, list[PolicyRun]] = {"fcfs": [], "rps": []}
    for _ in range(3):
        text, video = rng.exponential(1.0, 300), rng.exponential(2.0, 60)
        for policy, scale in (("fcfs", 1.0), ("rps", 0.3)):  # rps: text well under half of fcfs's
            records = _records(scale * text, video)
            bench = BenchRun(records, Tally(360, 360, 0, 0, 0), None, {}, {})
            runs[policy].append(PolicyRun(bench, {"engine": {}, "loop_lag_s": {}, "stages": {}}, [], None))
    (tmp_path / "vllm_model").mkdir()
    shutil.copy(REPOSITORY / SETTINGS_FILE, tmp_path / SETTINGS_FILE)
    lines = target_lines(LoadRuns(2.0, 0.7, runs), tmp_path, "mixed-iii")
    by_metric = {line.split(": ")[0]: line for line in lines}
    assert by_metric["target rps / fcfs text P90 TTFT <= 0.75x"].endswith(" met")
    # The same decode times under both: an interval of exactly 1 meets a 1.0x bound.
    assert by_metric["target rps / fcfs TPOT mean <= 1x"].endswith(" met")
    assert not any("modality-priority" in line for line in lines)  # a baseline that did not run
    (starvation,) = [line for line in lines if line.startswith("rps pebbles")]
    hold_s = json.loads((REPOSITORY / SETTINGS_FILE).read_text())["rps"].get("decode_hold_s", 0.0)
    assert f"decode hold {hold_s:.2f} s" in starvation  # no cost-model report here: the paper's clock
    assert starvation.count(" s of ") == 3  # one per run
    longest = [line for line in lines if "longest video TTFT per run" in line]
    assert [line.split(":")[0] for line in longest] == ["fcfs", "rps"]
    assert len(longest[0].split(": ")[-1].split(", ")) == 3


def test_a_video_past_its_bound_in_one_run_is_counted(tmp_path: Path) -> None:
    (tmp_path / "vllm_model").mkdir()
    shutil.copy(REPOSITORY / SETTINGS_FILE, tmp_path / SETTINGS_FILE)
    runs: dict[str, list[PolicyRun]] = {"modality-priority": [], "rps": []}
    for wait in (1.0, 1e6):  # the second run's videos waited far past any bound
        for policy in runs:
            records = _records(np.full(40, 0.1), np.full(4, wait))
            bench = BenchRun(records, Tally(44, 44, 0, 0, 0), None, {}, {})
            runs[policy].append(PolicyRun(bench, {"engine": {}, "loop_lag_s": {}, "stages": {}}, [], None))
    (line,) = [x for x in wait_lines(LoadRuns(2.0, 1.3, runs), tmp_path) if "starvation bound" in x]
    assert "1 of 2 runs over it" in line
    assert "modality-priority: longest video TTFT per run (s): 1.000, 1000000.000" in wait_lines(
        LoadRuns(2.0, 1.3, runs), tmp_path
    )


def test_a_policy_without_aging_is_held_to_the_better_stock_priority_per_run(tmp_path: Path) -> None:
    # Per run: (sand, video) waits under each policy; headroom's videos wait 2x the better stock's in
    # the second run only, and FCFS (not a priority) is not what it is held to.
    waits = {
        "fcfs": [(0.1, 0.5), (0.1, 0.5)],
        "vllm-priority": [(0.2, 3.0), (0.2, 2.0)],
        "modality-priority": [(0.2, 4.0), (0.2, 1.0)],
        "headroom": [(0.2, 3.5), (0.2, 2.0)],
    }
    runs: dict[str, list[PolicyRun]] = {policy: [] for policy in waits}
    for policy, per_run in waits.items():
        for sand, video in per_run:
            records = _records(np.full(40, sand), np.full(4, video))
            bench = BenchRun(records, Tally(44, 44, 0, 0, 0), None, {}, {})
            runs[policy].append(PolicyRun(bench, {"engine": {}, "loop_lag_s": {}, "stages": {}}, [], None))
    (tmp_path / "vllm_model").mkdir()
    settings = json.loads((REPOSITORY / SETTINGS_FILE).read_text())
    # Without light steps, whose stretch of the margin needs the repository's cost models (none here).
    settings["rps"]["light_steps"] = False
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(settings))
    hold_s = settings["rps"].get("decode_hold_s", 0.0)
    lines = wait_lines(LoadRuns(2.0, 0.9, runs), tmp_path)  # no cost-model report: the paper's clock
    checked = {line.split(" TTFT")[0]: line for line in lines if "the better of" in line}
    assert set(checked) == {"headroom longest sand", "headroom longest pebbles"}
    assert "vllm-priority, modality-priority plus its decode hold" in checked["headroom longest sand"]
    assert "every run within it" in checked["headroom longest sand"]
    bounds = [1.25 * 3.0 + hold_s, 1.25 * 1.0 + hold_s]  # the better stock priority's, per run
    assert bounds[0] >= 3.5 and bounds[1] < 2.0  # the first run within, the second over
    shown = f"3.50 s of {bounds[0]:.2f} s; 2.00 s of {bounds[1]:.2f} s (1 of 2 runs over it)"
    assert shown in checked["headroom longest pebbles"]


def test_the_demo_says_which_fit_each_policy_served_and_how_it_moved(tmp_path: Path) -> None:
    train_reference_cost_models(tmp_path)
    trained, _ = fit_of_report(json.loads((tmp_path / REPORT_FILE).read_text()))
    records = _records(np.ones(10), np.ones(2))
    bench = BenchRun(records, Tally(12, 12, 0, 0, 0), None, {}, {})
    analysis: dict[str, dict[str, float]] = {"engine": {}, "loop_lag_s": {}, "stages": {}}
    frozen = {"fcfs": [PolicyRun(bench, analysis, [], None)], "rps": [PolicyRun(bench, analysis, [], None)]}
    lines = fit_lines(LoadRuns(2.0, None, frozen), tmp_path)
    assert "llava-onevision-qwen2-7b" in lines[0]
    assert lines[1].startswith("online refit off")

    doubled = {m: PrefillLine(line.intercept, 2 * line.slope) for m, line in trained.items()}
    fits = [ServedFit(2, 40, 1, doubled), ServedFit(3, 60, 0, doubled)]
    online = {**frozen, "rps": [PolicyRun(bench, analysis, [], fit) for fit in fits]}
    lines = fit_lines(LoadRuns(2.0, None, online), tmp_path)
    assert len(lines) == 2 and lines[1].startswith("rps: refitted online, 5 updates over 2 server(s)")
    assert "from 100 observed prefills, boundaries moved 1 times" in lines[1]
    slope_ms = trained[Modality.TEXT].slope * 1e3
    assert f"text {slope_ms:.3g} -> {2 * slope_ms:.3g} ms/token" in lines[1]


def test_seeds_whose_runs_found_the_machine_at_other_speeds_are_named() -> None:
    runs = {"fcfs": (4.0, 5.0, 5.0), "vllm-priority": (5.6, 5.0, 4.0), "rps": (5.6, 5.2, 4.52)}
    load = LoadRuns(2.0, 0.9, {policy: _speed_runs(*speeds) for policy, speeds in runs.items()})
    first, *flagged = machine_speed_lines(load)
    assert first.endswith("fcfs 4.00, 5.00, 5.00; vllm-priority 5.60, 5.00, 4.00; rps 5.60, 5.20, 4.52")
    # Seed 0 against fcfs: 40% slower; seed 2 against fcfs 10% faster and against vllm-priority 13%
    # slower, both within the tolerance.
    assert flagged == [
        "seed 0: rps's run found the machine 40% slower than fcfs's (5.60 ms against 4.00): "
        "this seed's ratios to fcfs measure the machine as well"
    ]
    assert machine_speed_lines(load, tolerance=0.11)[1:] == [
        flagged[0],
        "seed 2: rps's run found the machine 13% slower than vllm-priority's (4.52 ms against 4.00): "
        "this seed's ratios to vllm-priority measure the machine as well",
    ]


def test_each_seed_runs_its_policies_back_to_back_in_alternating_order() -> None:
    policies = ["fcfs", "modality-priority", "rps"]
    order = run_order(policies, range(4), reuse_servers=False)
    forth, back = policies, policies[::-1]
    assert order == [(p, [seed]) for seed, ps in enumerate([forth, back, forth, back]) for p in ps]
    for policy in policies:  # every policy's runs in seed order, as the pairing needs
        assert [seeds[0] for p, seeds in order if p == policy] == [0, 1, 2, 3]
    # Reusing servers merges a policy that ends one seed with its run that starts the next.
    assert run_order(["fcfs", "rps"], range(3), reuse_servers=True) == [
        ("fcfs", [0]),
        ("rps", [0, 1]),
        ("fcfs", [1, 2]),
        ("rps", [2]),
    ]
    assert [p for p, _ in run_order(policies, range(2), reuse_servers=True)] == [*policies, *back[1:]]


def test_the_plan_is_written_before_any_run() -> None:
    config = DemoConfig(
        Path("repo"), Path("model"), Path("out"), policies=("fcfs", "rps"), repeats=3, requests=120
    )
    plan = run_plan(config)
    assert plan[0].startswith("plan, fixed before the first run: 3 seeds (0..2) x 2 policies (fcfs, rps)")
    assert plan[1] == "servers in order (policy seeds): fcfs 0; rps 0; rps 1; fcfs 1; fcfs 2; rps 2"
    assert "none is added, repeated or dropped" in plan[2]
    reused = dataclasses.replace(config, reuse_servers=True)
    assert run_plan(reused)[1] == (
        "servers in order (policy seeds): fcfs 0; rps 0+1; fcfs 1+2; rps 2"
        " (the first fcfs runs on the capacity search's server)"
    )
    # Given rates, no capacity is searched: no server to take over.
    assert run_plan(dataclasses.replace(reused, rates=(1.0,)))[1].endswith("rps 2")
    # One server holds every policy: the same order, no server started between runs.
    shared = run_plan(dataclasses.replace(config, one_server=True, warm_up=0.3))
    assert "each measured from 30% of its arrivals to 90%" in shared[0]
    assert shared[1] == (
        "one server for every run, the capacity search's included, an engine per policy "
        "(vllm_model-fcfs, vllm_model-rps); runs in order (policy seeds): fcfs 0; rps 0+1; fcfs 1+2; rps 2"
    )
    # Without FCFS among the runs, the capacity search still gets its FCFS engine.
    without = run_plan(dataclasses.replace(config, policies=("vllm-priority", "rps"), one_server=True))
    assert "(vllm_model-vllm-priority, vllm_model-rps, vllm_model-fcfs)" in without[1]
    given = run_plan(
        dataclasses.replace(config, policies=("vllm-priority", "rps"), one_server=True, rates=(1.0,))
    )
    assert "(vllm_model-vllm-priority, vllm_model-rps)" in given[1]


def test_the_time_ahead_follows_the_measured_rate() -> None:
    # 3 seeds x 2 policies of 120 requests: at 4/s, 3 minutes of arrivals; a machine serving a
    # tenth as fast is told so before its first run.
    config = DemoConfig(
        Path("repo"), Path("model"), Path("out"), policies=("fcfs", "rps"), repeats=3, requests=120
    )
    assert (
        arrivals_ahead(config, [4.0])
        == "6 runs of 120 requests at 4.00/s: 3 min of arrivals, each run's drain after it"
    )
    assert arrivals_ahead(config, [0.4]).endswith(": 30 min of arrivals, each run's drain after it")


def _speed_runs(*speeds: float) -> list[PolicyRun]:
    bench = BenchRun(_records(np.ones(10), np.ones(2)), Tally(12, 12, 0, 0, 0), None, {}, {})
    engine = [{"lone_decode_step_ms": ms} for ms in speeds]
    return [PolicyRun(bench, {"engine": e, "loop_lag_s": {}, "stages": {}}, [], None) for e in engine]


def test_a_capacity_never_bracketed_is_named_a_lower_bound() -> None:
    assert LoadRuns(2.0, 0.9).name == "2.00 req/s (0.9x)"
    assert LoadRuns(2.0, 0.9, bracketed=False).name == "2.00 req/s (0.9x of a lower bound on the capacity)"
    assert LoadRuns(2.0, None, bracketed=False).name == "2.00 req/s"
    # Where every probe grew, down to the rate the loads are a fraction of, it bounds nothing from below.
    above = LoadRuns(2.0, 0.9, bracketed=False, above=True).name
    assert above == "2.00 req/s (0.9x of a rate above the capacity)"


def test_engine_arguments_reach_every_server_through_the_settings(tmp_path: Path) -> None:
    engine_args = '{"num_gpu_blocks_override": 96}'
    config = DemoConfig(REPOSITORY, tmp_path, tmp_path, engine_args=engine_args)
    env = engine_settings(config, None, "rps").environment()
    settings = read_settings(REPOSITORY / SETTINGS_FILE, REPOSITORY, env)
    assert settings.engine_args["num_gpu_blocks_override"] == 96
    assert settings.engine_args["max_num_batched_tokens"] == 2048  # model.json's others kept
    assert settings.policy.value == "rps"
    assert (
        ENGINE_ARGS_ENV
        not in engine_settings(DemoConfig(REPOSITORY, tmp_path, tmp_path), None, "rps").environment()
    )


def test_the_candidate_is_the_policy_that_is_not_stock() -> None:
    assert candidate_of(["modality-priority", "headroom", "vllm-priority"]) == "headroom"
    assert candidate_of(["fcfs", "rps"]) == "rps"
    assert candidate_of(["fcfs", "vllm-priority"]) == CANDIDATE


def test_a_run_is_kept_on_disk_as_it_ends_with_every_request(tmp_path: Path) -> None:
    config = DemoConfig(Path("repo"), Path("model"), tmp_path, warm_up=0.3)
    (tmp_path / "runs").mkdir()
    records = _records(np.linspace(0.1, 2.0, 20), np.linspace(1.0, 5.0, 4))
    analysis = {
        "engine": {"steps": 7},
        "loop_lag_s": {},
        "first_token_steps": {},
        "first_token_tail": {},
        "token_parts": {},
        "run_log": "run.jsonl",
        "window": [0, 1],
    }
    run = PolicyRun(BenchRun(records, Tally(24, 24, 0, 0, 0), None, {}, {}), analysis, [], None)
    kept = json.loads(keep_run(config, run, "rps", 2.5, 3).read_text())
    assert (kept["policy"], kept["rate"], kept["seed"]) == ("rps", 2.5, 3)
    back = RequestRecords.from_json(kept["records"])
    assert np.array_equal(back.first_token_s, records.first_token_s) and np.array_equal(
        back.level, records.level
    )
    # As demo.json holds the run (NaN for a metric with too few values, as there).
    expected = {"policy": "rps", "rate": 2.5, "seed": 3, **run.summary(0.3)}
    assert json.dumps(kept, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert kept["engine"] == {"steps": 7}
    # Read back by policy and seed, beside another policy's run of the same seed.
    keep_run(config, run, "fcfs", 2.5, 3)
    runs = read_kept_runs(tmp_path / "runs")
    assert sorted(runs) == ["fcfs", "rps"] and list(runs["rps"]) == [3]
    assert runs["rps"][3]["records"] == kept["records"]
