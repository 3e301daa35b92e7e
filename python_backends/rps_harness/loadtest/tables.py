"""The text tables `rps-serve demo`, `rps-serve bench` and the GPU check print: TTFT per modality, the
server-side stages, the candidate's ratios, the engine's steps, and where the time to a first token
and per output token went."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rps_harness.comparison import HEADLINE_METRICS, Ratio
from rps_harness.loadtest.run_analysis import (
    FIRST_TOKEN_STEP,
    FIRST_TOKEN_TAIL,
    STAGES,
    STEP_IN_PROGRESS,
    TAIL_SHARE,
    TOKEN_PARTS,
)
from rps_harness.metrics import RequestRecords, grouped_metrics
from rps_serve.requests import Modality, RequestClass

if TYPE_CHECKING:
    from rps_harness.loadtest.demo_records import PolicyRun


def ttft_table(records: dict[str, RequestRecords]) -> str:
    """Per modality: count, then mean and P90 TTFT (seconds) of each policy."""
    policies = list(records)
    widths = {p: (max(10, len(p) + 5), max(9, len(p) + 4)) for p in policies}
    header = f"{'TTFT (s)':<10} {'n':>4}" + "".join(
        f" {p + ' mean':>{widths[p][0]}} {p + ' P90':>{widths[p][1]}}" for p in policies
    )
    lines = [header]
    reports = {p: grouped_metrics(r) for p, r in records.items()}
    first = records[policies[0]]
    for modality in Modality:
        count = int((first.modality == modality.index).sum())
        cells = []
        for policy in policies:
            ttft = reports[policy]["by_modality"][modality.value]["ttft"]
            mean_width, p90_width = widths[policy]
            cells.append(f" {seconds(ttft['mean']):>{mean_width}} {seconds(ttft['p90']):>{p90_width}}")
        lines.append(f"{modality.value:<10} {count:>4}" + "".join(cells))
    done = ", ".join(f"{p} {int(r.completed.sum())}/{len(r.ttft)}" for p, r in records.items())
    lines.append(f"completed: {done}")
    return "\n".join(lines)


def stage_table(stages: dict[str, dict[str, Any]]) -> str:
    """Per policy and class: mean seconds from arrival at vllm_model to the first token, and its parts
    (`loadtest.stages`, from the server's per-class metrics)."""
    header = ("to 1st token", "front queue", "front work", "engine")
    widths = (12, 11, 10, 7)
    lines = [
        f"{'server-side (s)':<22} {'n':>4} "
        + " ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True))
    ]
    for policy, by_class in stages.items():
        for label, stage in by_class.items():
            if not stage["requests"]:
                continue
            cells = [
                stage[k] for k in ("to_first_token_s", "front_end_queue_s", "front_end_work_s", "engine_s")
            ]
            shown = " ".join(f"{seconds(v):>{w}}" for v, w in zip(cells, widths, strict=True))
            lines.append(f"{policy + ' ' + label:<22} {int(stage['requests']):>4} {shown}")
    return "\n".join(lines)


def ratio_table(ratios: dict[str, dict[str, Ratio]], candidate: str) -> str:
    """Each headline metric (a row), `candidate` over each baseline (a column) with its 95% interval
    over n seeds, "=" where the interval includes 1 (no difference measured); then why a ratio was not
    measured, and the first metric's ratio in each seed alone."""
    if not ratios:
        return ""
    names = [m.name for m in HEADLINE_METRICS]
    width = 30
    lines = [f"{candidate + ' / baseline (95% CI)':<22}" + "".join(f" {b:>{width}}" for b in ratios)]
    for name in names:
        cells = [_ratio_cell(by_metric[name]) for by_metric in ratios.values()]
        lines.append(f"{name:<22}" + "".join(f" {c:>{width}}" for c in cells))
    first = next(iter(ratios.values()))[names[0]]
    lines.append(
        f"(steady state, n = {first.seeds} paired seeds, {first.requests} {candidate} requests; "
        "the interval over seeds; = : no difference measured, the interval includes 1)"
    )
    refusals = {
        f"{name}: {ratio.refused}"
        for by_metric in ratios.values()
        for name, ratio in by_metric.items()
        if ratio.refused
    }
    lines += [f"not measured, {reason}" for reason in sorted(refusals)]
    for baseline, by_metric in ratios.items():
        seeds = ", ".join(f"{r:.2f}x" for r in by_metric[names[0]].per_seed)
        lines.append(f"{candidate} / {baseline} {names[0]}, each seed alone: {seeds}")
    return "\n".join(lines)


def _ratio_cell(ratio: Ratio) -> str:
    """A table cell: the reasons a ratio was not measured are listed below the table."""
    return ratio.marked() if ratio.measured else "not measured"


def engine_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy, over the steady windows: the engine's steps and the `vllm_model` loop's lag."""
    columns = (
        ("busy", "busy", "{:.0%}"),
        ("step_ms_mean", "step ms", "{:.1f}"),
        ("step_ms_per_decode", "step/decode ms", "{:.1f}"),
        ("decode_step_ms", "decode-only ms", "{:.1f}"),
        ("lone_decode_step_ms", "lone decode ms", "{:.2f}"),
        ("mixed_step_ms", "with-prefill ms", "{:.1f}"),
        ("prefill_share", "prefill steps", "{:.0%}"),
        ("running", "running", "{:.1f}"),
        ("waiting", "waiting", "{:.1f}"),
        ("preemptions", "preempted", "{:.0f}"),
    )
    header = f"{'engine, steady state':<22}" + "".join(f" {title:>15}" for _, title, _ in columns)
    lines = [header + f" {'loop lag P99 ms':>15}"]
    for policy, summary in analysis.items():
        engine, lag = summary["engine"], summary["loop_lag_s"]
        cells = [formatted(fmt, engine.get(key)) for key, _, fmt in columns]
        cells.append(formatted("{:.1f}", None if "p99" not in lag else 1000 * lag["p99"]))
        lines.append(f"{policy:<22}" + "".join(f" {c:>15}" for c in cells))
    return "\n".join(lines)


def run_stage_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy and class, mean seconds of each stage to the first token (from the run logs), and of
    vLLM's input stage the part spent waiting for the engine step in progress ("of it, step"): the
    engine core takes a new request in only between steps, so that part is the engine's, not vLLM's
    input processing."""
    titles = (
        "front queue",
        "front work",
        "vllm input",
        "of it, step",
        "engine queue",
        "prefill",
        "to 1st token",
    )
    keys = (*STAGES[:3], STEP_IN_PROGRESS, *STAGES[3:], "to_first_token_s")
    return _class_table(analysis, "stages", "stages (s)", titles, [(key, seconds) for key in keys])


def first_token_step_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy and class, the step that gave each request its first token (from the run logs,
    `run_analysis.first_token_steps`): the prefill stage, that step's seconds and prompt tokens beside
    the request's own and the other sand's finishing in it, the shares with a vision encoder (any, and
    another request's) and with the request alone, and the alone steps' seconds."""
    titles = (
        "prefill",
        "step s",
        "step tokens",
        "own tokens",
        "sand beside",
        "encoder",
        "others' enc",
        "alone",
        "alone step s",
    )
    count = functools.partial(formatted, "{:.0f}")
    share = functools.partial(formatted, "{:.0%}")
    shows: tuple[Callable[[float | None], str], ...] = (
        seconds, seconds, count, count, count, share, share, share, seconds
    )  # fmt: skip
    columns = list(zip((*FIRST_TOKEN_STEP, "alone_step_s"), shows, strict=True))
    return _class_table(analysis, "first_token_steps", "first-token step", titles, columns)


def first_token_tail_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy and class, what its slowest first tokens waited for (from the run logs,
    `run_analysis.first_token_tail`): their time to the first token, of it the wait for the step in
    progress, the engine queue and the prefill stage; the step in progress when they reached vLLM
    (its seconds, and the share with a vision encoder) and the step of their first token (its seconds,
    and the share with another request's encoder)."""
    titles = (
        "to 1st token",
        "of it, step",
        "engine queue",
        "prefill",
        "step before",
        "its encoder",
        "own step",
        "others' enc",
    )
    share = functools.partial(formatted, "{:.0%}")
    shows: tuple[Callable[[float | None], str], ...] = (*(seconds,) * 5, share, seconds, share)
    columns = list(zip(FIRST_TOKEN_TAIL, shows, strict=True))
    return _class_table(analysis, "first_token_tail", f"slowest {TAIL_SHARE:.0%} (s)", titles, columns)


def token_parts_table(analysis: dict[str, dict[str, Any]]) -> str:
    """Per policy and class, the mean time per output token and the steps it was spent in (from the
    run logs, `run_analysis.token_parts`), and how many requests those steps decoded."""
    titles = ("TPOT", "encoder", "prefill", "decode", "between", "decoding")
    ms = functools.partial(formatted, "{:.1f}")
    columns = [(key, ms) for key in ("tpot_ms", *TOKEN_PARTS, "decoding")]
    return _class_table(analysis, "token_parts", "per output token (ms)", titles, columns)


def _class_table(
    analysis: dict[str, dict[str, Any]],
    key: str,
    heading: str,
    titles: Sequence[str],
    columns: Sequence[tuple[str, Callable[[float | None], str]]],
) -> str:
    """A row per policy and class of `analysis[policy][key]`, in class order."""
    lines = [f"{heading:<24} {'n':>5}" + "".join(f" {t:>12}" for t in titles)]
    for policy, summary in analysis.items():
        for label, row in sorted(
            summary[key].items(), key=lambda item: RequestClass.from_label(item[0]).value
        ):
            cells = [show(row[name]) for name, show in columns]
            lines.append(
                f"{policy + ' ' + label:<24} {int(row['requests']):>5}" + "".join(f" {c:>12}" for c in cells)
            )
    return "\n".join(lines)


def process_table(runs: dict[str, list[PolicyRun]]) -> str:
    """Per policy, each process's role, the cores it ran on and its CPU seconds (its first run)."""
    lines = []
    for policy, policy_runs in runs.items():
        shown = ", ".join(f"{p['role']} [{p['cores']}] {p['cpu_s']:.0f} s" for p in policy_runs[0].processes)
        lines.append(f"{policy}: {shown}")
    return "\n".join(lines)


def formatted(fmt: str, value: float | None) -> str:
    return "-" if value is None or value != value else fmt.format(value)


def seconds(value: float | None) -> str:
    return formatted("{:.3f}", value)
