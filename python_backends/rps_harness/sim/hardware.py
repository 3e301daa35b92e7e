"""Model and GPU sizes the timing model and KV capacity need, and how tensor parallelism scales.

Assumptions (none of these are published with the profiles):
- GPU: H100 with 96 GB (the reference profiles' card), 3.35 TB/s HBM, vLLM's
  gpu_memory_utilization 0.9, 3 GB per GPU kept for activations, CUDA graphs and the encoder cache;
  70% of peak bandwidth reached by decode.
- Weights in bf16 (2 bytes per parameter, vision tower included); KV cache in bf16,
  2 (K, V) x layers x KV heads x head dim x 2 bytes per token. LLaVA-OneVision-7B/72B and
  InternVL3.5-38B use their published language models (Qwen2-7B, Qwen2-72B, Qwen3-32B). The
  Qwen3.5-27B and Gemma-4-31B shapes are guesses of dense models of that size (all layers full
  attention, which overstates KV for models with sliding-window layers).
- Tensor parallelism over n GPUs speeds a step up by n ** 0.85 (all-reduce and imbalance cost
  ~10% at 2 GPUs, ~20% at 4); the encoder is parallelized with the LLM.
- Execution mode: the published prefill lines come from graph-mode runs (CUDA graphs replay a step's
  kernels with one launch). Eager mode (`--enforce-eager`, as the paper served) launches every kernel
  from Python: about 0.3 ms per decoder layer and step (a dozen kernels of ~25 us each, launch plus
  framework), 8 ms for a 28-layer 7B model. Tensor parallelism does not shorten it: every GPU
  launches the same kernels.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

TP_EXPONENT = 0.85
EAGER_STEP_S_PER_LAYER = 0.3e-3


class Execution(enum.Enum):
    """How vLLM runs a step: CUDA graphs (its default) or eager (`--enforce-eager`)."""

    GRAPH = "graph"
    EAGER = "eager"


@dataclass(frozen=True)
class GpuSpec:
    memory_bytes: float = 96e9
    hbm_bytes_per_s: float = 3.35e12
    memory_utilization: float = 0.9
    reserved_bytes: float = 3e9
    bandwidth_efficiency: float = 0.7


@dataclass(frozen=True)
class ModelSpec:
    """Sizes of one served model; `profile_gpus` is the GPU count its reference profile was taken on."""

    name: str
    parameters: float
    layers: int
    kv_heads: int
    head_dim: int
    profile_gpus: int

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.parameters

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def step_overhead_s(self, execution: Execution) -> float:
        """What every engine step costs beyond the graph-mode lines in `execution` mode."""
        return self.layers * EAGER_STEP_S_PER_LAYER if execution is Execution.EAGER else 0.0


MODEL_SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("llava-onevision-qwen2-7b", 8.0e9, 28, 4, 128, profile_gpus=1),
        ModelSpec("llava-onevision-qwen2-72b", 73.2e9, 80, 8, 128, profile_gpus=4),
        ModelSpec("internvl3.5-38b", 38.4e9, 64, 8, 128, profile_gpus=4),
        ModelSpec("qwen3.5-27b", 27.0e9, 64, 4, 256, profile_gpus=4),
        ModelSpec("gemma-4-31b", 31.0e9, 60, 16, 128, profile_gpus=4),
    )
}


def model_spec(name: str) -> ModelSpec:
    if name not in MODEL_SPECS:
        raise ValueError(f"no model sizes for {name!r}; known: {', '.join(MODEL_SPECS)}")
    return MODEL_SPECS[name]


def tp_speedup(gpus: int) -> float:
    """Step speed-up of tensor parallelism over `gpus` GPUs relative to one."""
    if gpus < 1:
        raise ValueError(f"need at least one GPU, got {gpus}")
    return float(gpus**TP_EXPONENT)


H100 = GpuSpec()


def kv_capacity_tokens(spec: ModelSpec, gpus: int, gpu: GpuSpec = H100) -> int:
    """KV-cache tokens that fit on `gpus` GPUs after the weights; error when the weights do not fit."""
    usable = gpus * (gpu.memory_bytes * gpu.memory_utilization - gpu.reserved_bytes)
    free = usable - spec.weight_bytes
    if free <= 0:
        raise ValueError(
            f"{spec.name} needs {spec.weight_bytes / 1e9:.0f} GB of weights; {gpus} GPU(s) leave "
            f"{usable / 1e9:.0f} GB: use more GPUs"
        )
    return int(free // spec.kv_bytes_per_token)
