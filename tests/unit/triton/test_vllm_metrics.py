"""vLLM's own metrics as vllm_backend exports them, fed from the stats vLLM hands its stat loggers."""

from __future__ import annotations

from vllm.v1.engine import FinishReason
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats

from rps_serve.triton.class_metrics import EngineLoad
from rps_serve.triton.engine_stats import EngineStatsLogger
from rps_serve.triton.vllm_metrics import VllmMetrics
from tests.unit.triton.metrics_recorder import RecordingPbUtils

LABELS = {"model": "vllm_model", "version": "1"}
# vllm_backend's families (src/utils/metrics.py, releases 25.01 to 26.01) and their kinds
VLLM_BACKEND = {
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
}


def _step() -> IterationStats:
    """A step in which one request got its first token and another its last, as vLLM fills it."""
    stats = IterationStats()
    stats.prompt_token_stats.total = 12
    stats.num_generation_tokens = 2
    stats.time_to_first_tokens_iter.append(0.25)
    stats.inter_token_latencies_iter.append(0.05)
    stats.n_params_iter.append(1)
    stats.finished_requests.append(
        FinishedRequestStats(
            FinishReason.LENGTH,
            e2e_latency=1.5,
            num_prompt_tokens=30,
            num_generation_tokens=4,
            queued_time=0.125,
            prefill_time=0.25,
            decode_time=0.5,
            inference_time=0.75,
        )
    )
    return stats


def test_every_vllm_backend_family_is_published_with_its_labels_and_fed_from_vllms_stats() -> None:
    pb_utils = RecordingPbUtils()
    metrics = VllmMetrics(pb_utils, LABELS, max_model_len=4096)
    EngineStatsLogger(lambda load: None, None, iterations=metrics.record).record(None, _step())
    values = {}
    for name, kind in VLLM_BACKEND.items():
        family = pb_utils.published[name]
        (series,) = family.series
        assert (family.kind, series.labels) == (kind, LABELS), name
        values[name] = series.value
    assert values == {
        "vllm:prompt_tokens_total": 12,
        "vllm:generation_tokens_total": 2,
        "vllm:time_to_first_token_seconds": 0.25,
        "vllm:time_per_output_token_seconds": 0.05,
        "vllm:e2e_request_latency_seconds": 1.5,
        "vllm:request_prompt_tokens": 30,
        "vllm:request_generation_tokens": 4,
        "vllm:request_params_n": 1,
    }
    phases = {
        phase: pb_utils.published[f"vllm:request_{phase}_time_seconds"].series[0].value
        for phase in ("queue", "prefill", "decode", "inference")
    }
    assert phases == {"queue": 0.125, "prefill": 0.25, "decode": 0.5, "inference": 0.75}
    metrics.close()


def test_the_engines_load_goes_to_vllms_gauges_too() -> None:
    pb_utils = RecordingPbUtils()
    metrics = VllmMetrics(pb_utils, LABELS, max_model_len=4096)
    metrics.engine_load(EngineLoad(waiting=3, running=5, kv_cache_usage=0.25))
    read = {
        name: (pb_utils.published[name].kind, pb_utils.published[name].series[0].value)
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")
    }
    assert read == {
        "vllm:num_requests_waiting": ("gauge", 3),
        "vllm:num_requests_running": ("gauge", 5),
        "vllm:kv_cache_usage_perc": ("gauge", 0.25),
    }
    metrics.close()
