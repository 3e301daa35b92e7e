"""Where each class's requests waited on the server during a run: the difference of `vllm_model`'s
per-class counters between two scrapes, as mean seconds per request from arrival at `vllm_model` to
the first token, split into waiting for a front-end worker, the worker's decoding and rendering, and
the engine (its queue and prefill, and vLLM's own input processing where vLLM renders)."""

from __future__ import annotations

from rps_harness.loadtest.server_stats import MetricsSnapshot
from rps_serve.requests import RequestClass
from rps_serve.triton import protocol as p

_STAGES = {
    "front_end_queue_s": "rps_front_end_queue_seconds_total",
    "front_end_work_s": "rps_front_end_work_seconds_total",
    "to_first_token_s": "rps_wait_seconds_total",
}


def stage_breakdown(
    before: MetricsSnapshot, after: MetricsSnapshot, model: str = p.VLLM_MODEL
) -> dict[str, dict[str, float | None]]:
    """Per class of engine model `model`: requests, and mean seconds per request of each stage (None for
    a class without any)."""
    breakdown: dict[str, dict[str, float | None]] = {}
    for cls in RequestClass:
        labels = {"model": model, "rps_class": cls.label}

        def delta(name: str, labels: dict[str, str] = labels) -> float:
            return after.total(name, **labels) - before.total(name, **labels)

        requests = delta("rps_requests_total")
        means = {stage: delta(metric) / requests if requests else None for stage, metric in _STAGES.items()}
        queued, work, total = means["front_end_queue_s"], means["front_end_work_s"], means["to_first_token_s"]
        engine = None if total is None or queued is None or work is None else total - queued - work
        breakdown[cls.label] = {"requests": requests, **means, "engine_s": engine}
    return breakdown


def pooled_stages(runs: list[dict[str, dict[str, float | None]]]) -> dict[str, dict[str, float | None]]:
    """Several runs' `stage_breakdown`s as one: per class, the requests summed and each stage's mean
    weighted by them."""
    pooled: dict[str, dict[str, float | None]] = {}
    for cls in RequestClass:
        parts = [run[cls.label] for run in runs if run.get(cls.label, {}).get("requests")]
        requests = sum(float(part["requests"] or 0) for part in parts)
        means: dict[str, float | None] = {}
        for stage in (*_STAGES, "engine_s"):
            known = [part for part in parts if part[stage] is not None]
            weight = sum(float(part["requests"] or 0) for part in known)
            means[stage] = (
                sum(float(part[stage] or 0) * float(part["requests"] or 0) for part in known) / weight
                if weight
                else None
            )
        pooled[cls.label] = {"requests": requests, **means}
    return pooled
