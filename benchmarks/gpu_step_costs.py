"""Engine-step costs of the served model's shapes on a GPU, against the simulator's timing model.

The simulator's H100 claims rest on `rps_harness.sim.timing`: a step costs a fixed part plus the text
line's slope per scheduled token, plus reading every decode's KV cache, plus the vision encoder, and a
later prefill chunk costs what the first did. `measure` times those steps on the GPU it runs on, with
the model's own matrix shapes (random bf16 weights, no checkpoint needed): a decoder layer as
Qwen2's (RMSNorm, grouped-query attention, SwiGLU), tokens of a step flattened through the linear
layers and attention split per request as vLLM's flattened batches do, decode-only steps replayed
from a CUDA graph as vLLM does by default. `compare` (here, with the package) sets each row beside
what the simulator predicts for it.

What it leaves out, and so bounds from below: vLLM's own scheduling, sampling and input processing
between steps, rotary embeddings, and for a tensor-parallel model the all-reduce (each GPU's share of
the layers is timed on one GPU).

    python benchmarks/gpu_step_costs.py measure --out steps.json          # on the GPU (torch only)
    python -m benchmarks.gpu_step_costs compare steps.json                # here (rps_serve)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right


@dataclass(frozen=True)
class Shape:
    """One GPU's share of a transformer stack: every layer, a 1/tp slice of its heads and MLP."""

    name: str
    reference: str  # the simulator's model (`rps_harness.sim.hardware.MODEL_SPECS`)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tp: int = 1
    causal: bool = True  # False: a vision encoder, attention within each image

    def sliced(self) -> Shape:
        return replace(
            self,
            heads=self.heads // self.tp,
            kv_heads=max(self.kv_heads // self.tp, 1),
            intermediate=self.intermediate // self.tp,
            tp=1,
        )


SHAPES = {
    shape.name: shape
    for shape in (
        # LLaVA-OneVision's language models (Qwen2-7B, Qwen2-72B) and vision tower (SigLIP-so400m).
        Shape("qwen2-7b", "llava-onevision-qwen2-7b", 28, 3584, 28, 4, 128, 18944),
        Shape("qwen2-72b-tp4", "llava-onevision-qwen2-72b", 80, 8192, 64, 8, 128, 29568, tp=4),
        Shape("siglip-so400m", "llava-onevision-qwen2-7b", 27, 1152, 16, 16, 72, 4304, causal=False),
        Shape("tiny", "llava-onevision-qwen2-7b", 2, 64, 4, 2, 16, 128),
        Shape("tiny-encoder", "llava-onevision-qwen2-7b", 2, 64, 4, 4, 16, 128, causal=False),
    )
}
PATCHES_PER_IMAGE = 729  # SigLIP at 384x384, patch 14: the encoder's tokens per image or frame


class Stack:
    """Random weights of `shape`'s layers and the forward pass of one engine step."""

    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype) -> None:
        self.shape = shape.sliced()
        s = self.shape
        q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim

        def weight(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, device=device, dtype=dtype) * rows**-0.5

        self.layers = [
            {
                "qkv": weight(s.hidden, q + 2 * kv),
                "o": weight(q, s.hidden),
                "up_gate": weight(s.hidden, 2 * s.intermediate),
                "down": weight(s.intermediate, s.hidden),
                "norm": torch.ones(s.hidden, device=device, dtype=dtype),
            }
            for _ in range(s.layers)
        ]

    def _mlp(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        up, gate = (x @ layer["up_gate"]).chunk(2, dim=-1)
        act = F.silu(gate) if self.shape.causal else F.gelu(gate, approximate="tanh")
        return (act * up) @ layer["down"]

    def _norm(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.shape.causal:
            return F.rms_norm(x, (x.shape[-1],), layer["norm"])
        return F.layer_norm(x, (x.shape[-1],), layer["norm"])

    def step(
        self, chunk: int, context: int, decode_kv: torch.Tensor | None, kv_cache: torch.Tensor | None
    ) -> None:
        """One engine step: a prefill chunk of `chunk` tokens after `context` cached tokens (its KV in
        `kv_cache[:, :context]`), and one token for each request of `decode_kv` ([2, B, heads, L, dim])."""
        s = self.shape
        decodes = 0 if decode_kv is None else decode_kv.shape[1]
        x = torch.randn(
            chunk + decodes, s.hidden, device=self.layers[0]["o"].device, dtype=self.layers[0]["o"].dtype
        )
        q_width, kv_width = s.heads * s.head_dim, s.kv_heads * s.head_dim
        for layer in self.layers:
            qkv = self._norm(x, layer) @ layer["qkv"]
            q, k, v = qkv.split((q_width, kv_width, kv_width), dim=-1)
            outputs = []
            if chunk:
                outputs.append(self._chunk_attention(q[:chunk], k[:chunk], v[:chunk], context, kv_cache))
            if decodes:
                assert decode_kv is not None
                outputs.append(self._decode_attention(q[chunk:], decode_kv))
            x = x + torch.cat(outputs) @ layer["o"]
            x = x + self._mlp(self._norm(x, layer), layer)

    def _decode_attention(self, q: torch.Tensor, decode_kv: torch.Tensor) -> torch.Tensor:
        """One query token per request against its cached keys. A request's query heads of one KV
        head go in as a query of that many positions: the sums of grouped-query attention, in the
        fused kernels' native layout."""
        s = self.shape
        decodes = q.shape[0]
        query = q.view(decodes, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
        out = F.scaled_dot_product_attention(query, decode_kv[0], decode_kv[1])
        return out.reshape(decodes, s.heads * s.head_dim)

    def _chunk_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context: int, kv_cache: torch.Tensor | None
    ) -> torch.Tensor:
        s = self.shape
        tokens = q.shape[0]
        query = q.view(tokens, s.heads, s.head_dim).transpose(0, 1)
        key = k.view(tokens, s.kv_heads, s.head_dim).transpose(0, 1)
        value = v.view(tokens, s.kv_heads, s.head_dim).transpose(0, 1)
        if context:
            assert kv_cache is not None
            key = torch.cat((kv_cache[0, :, :context], key), dim=1)
            value = torch.cat((kv_cache[1, :, :context], value), dim=1)
        if not s.causal:  # images of PATCHES_PER_IMAGE tokens, each attending within itself
            images = tokens // PATCHES_PER_IMAGE
            shaped = [
                t.view(s.heads, images, PATCHES_PER_IMAGE, s.head_dim).transpose(0, 1)
                for t in (query, key, value)
            ]
            out = F.scaled_dot_product_attention(*shaped).transpose(0, 1)
        else:
            # Four dimensions and KV heads repeated to the query's: the fused kernels take nothing
            # else and the fallback is quadratic in memory. Causal from the chunk's own position
            # after its context.
            groups = s.heads // s.kv_heads
            key, value = key.repeat_interleave(groups, dim=0), value.repeat_interleave(groups, dim=0)
            if context:
                mask = causal_lower_right(tokens, key.shape[1])
                out = F.scaled_dot_product_attention(query[None], key[None], value[None], attn_mask=mask)[0]
            else:
                out = F.scaled_dot_product_attention(query[None], key[None], value[None], is_causal=True)[0]
        return out.transpose(0, 1).reshape(tokens, s.heads * s.head_dim)


def _timer(device: torch.device) -> Callable[[Callable[[], object], int], float]:
    """Median seconds of a call, by CUDA events on a GPU and the wall clock elsewhere."""

    def cuda(fn: Callable[[], object], repeats: int) -> float:
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return statistics.median(samples)

    def wall(fn: Callable[[], object], repeats: int) -> float:
        samples = []
        for _ in range(repeats):
            begin = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - begin)
        return statistics.median(samples)

    return cuda if device.type == "cuda" else wall


@dataclass(frozen=True)
class Plan:
    """The steps `measure` times, for the language model and for the vision encoder."""

    prefill: tuple[int, ...] = (256, 1024, 2048, 4096, 8192)
    chunk: int = 2048
    contexts: tuple[int, ...] = (2048, 6144, 14336)
    decodes: tuple[tuple[int, int], ...] = ((1, 1024), (16, 1024), (64, 1024), (256, 1024), (64, 4096))
    mixed: tuple[tuple[int, int, int], ...] = ((512, 16, 2048), (2048, 16, 2048), (2048, 64, 2048))
    images: tuple[int, ...] = (1, 4, 8, 16, 32)
    warmup: int = 2
    repeats: int = 5


TINY_PLAN = Plan((16, 32), 16, (16,), ((2, 16),), ((16, 2, 16),), (1, 2), 1, 2)


def language_rows(
    stack: Stack, plan: Plan, timer: Callable[[Callable[[], object], int], float]
) -> Iterator[dict[str, Any]]:
    """Prefill alone, a chunk after cached context, decode-only (eager and graph), chunk + decodes."""
    s = stack.shape
    device, dtype = stack.layers[0]["o"].device, stack.layers[0]["o"].dtype
    cache = torch.randn(2, s.kv_heads, max(plan.contexts), s.head_dim, device=device, dtype=dtype)

    def timed(fn: Callable[[], object]) -> float:
        with torch.inference_mode():
            for _ in range(plan.warmup):
                fn()
            return timer(fn, plan.repeats)

    def row(
        kind: str, chunk: int, context: int, decodes: int, decode_context: int, seconds: float
    ) -> dict[str, Any]:
        return {
            "kind": kind,
            "prefill_tokens": chunk,
            "context": context,
            "decodes": decodes,
            "decode_context": decode_context,
            "seconds": seconds,
        }

    def decode_kv(batch: int, length: int) -> torch.Tensor:
        return torch.randn(2, batch, s.kv_heads, length, s.head_dim, device=device, dtype=dtype)

    for tokens in plan.prefill:
        yield row("prefill", tokens, 0, 0, 0, timed(partial(stack.step, tokens, 0, None, None)))
    for context in plan.contexts:
        step = partial(stack.step, plan.chunk, context, None, cache)
        yield row("chunk", plan.chunk, context, 0, 0, timed(step))
    for batch, length in plan.decodes:
        step = partial(stack.step, 0, 0, decode_kv(batch, length), None)
        yield row("decode-eager", 0, 0, batch, batch * length, timed(step))
        if device.type == "cuda":
            yield row("decode-graph", 0, 0, batch, batch * length, timed(_graphed(step)))
    for chunk, batch, length in plan.mixed:
        step = partial(stack.step, chunk, 0, decode_kv(batch, length), None)
        yield row("mixed", chunk, 0, batch, batch * length, timed(step))


def encoder_rows(
    stack: Stack, plan: Plan, timer: Callable[[Callable[[], object], int], float]
) -> Iterator[dict[str, Any]]:
    """The vision tower on `images` images (or frames) at once."""
    for images in plan.images:
        tokens = images * PATCHES_PER_IMAGE

        def encode(tokens: int = tokens) -> None:
            stack.step(tokens, 0, None, None)

        with torch.inference_mode():
            for _ in range(plan.warmup):
                encode()
            seconds = timer(encode, plan.repeats)
        yield {"kind": "encoder", "images": images, "prefill_tokens": tokens, "seconds": seconds}


def _graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` captured once in a CUDA graph (its inputs static), replayed by the returned call."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.inference_mode():
        fn()  # warm-up outside the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        fn()
    return graph.replay


def measure(shapes: list[str], device: torch.device, plan: Plan) -> dict[str, Any]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    timer = _timer(device)
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    result: dict[str, Any] = {
        "device": machine,
        "torch": torch.__version__,
        "plan": asdict(plan),
        "shapes": {},
    }
    for name in shapes:
        shape = SHAPES[name]
        stack = Stack(shape, device, dtype)
        rows = encoder_rows if not shape.causal else language_rows
        result["shapes"][name] = {"shape": asdict(shape), "rows": list(rows(stack, plan, timer))}
        del stack
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure", help="time the steps on this machine's GPU (torch only)")
    run.add_argument("--shapes", default="qwen2-7b,siglip-so400m,qwen2-72b-tp4")
    run.add_argument("--device", default="cuda")
    run.add_argument("--tiny", action="store_true", help="the tiny plan (a check of the script on a CPU)")
    run.add_argument("--out", type=Path, required=True)
    report = commands.add_parser("compare", help="each measured step beside the simulator's prediction")
    report.add_argument("results", type=Path, nargs="+", help="measure's files (their shapes merged)")
    args = parser.parse_args()
    if args.command == "measure":
        result = measure(
            args.shapes.split(","), torch.device(args.device), TINY_PLAN if args.tiny else Plan()
        )
        args.out.write_text(json.dumps(result, indent=1))
    else:
        from benchmarks.gpu_step_comparison import (
            comparison_table,
        )  # the package's simulator, not needed on the GPU

        results = [json.loads(path.read_text()) for path in args.results]
        merged = {**results[0], "shapes": {k: v for result in results for k, v in result["shapes"].items()}}
        print(comparison_table(merged))


if __name__ == "__main__":
    main()
