"""Measured engine steps (`gpu_step_costs.py measure`) beside the simulator's timing model.

The simulator's prediction for each row is `TimingModel.step_s` of the shape's reference model on the
GPUs its published profile was taken on, in graph mode; decode rows are also predicted with the
measured GPU's memory bandwidth (an H200 reads 4.8 TB/s, the simulator's H100 3.35 TB/s), since
decode steps are bandwidth-bound and prefill steps compute-bound (the two cards compute alike).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rps_harness.sim.hardware import H100, GpuSpec, model_spec
from rps_harness.sim.timing import TimingModel, timing_from_lines
from rps_serve.profiles.lines import fit_line
from rps_serve.profiles.reference import reference_model
from rps_serve.requests import Modality

H200_BANDWIDTH = GpuSpec(hbm_bytes_per_s=4.8e12)
VIDEO_TOKENS_PER_FRAME = 196  # LLaVA-OneVision pools each frame's 729 patches 2x2


def simulated(reference: str, gpu: GpuSpec) -> TimingModel:
    spec = model_spec(reference)
    return timing_from_lines(reference_model(reference).lines, spec, spec.profile_gpus, gpu=gpu)


def predictions(row: dict[str, Any], h100: TimingModel, h200: TimingModel) -> dict[str, float]:
    """The simulator's seconds for a measured row, by what the row is: `h100` the simulator's own
    timing, `h200` the same with the measured GPU's bandwidth."""
    if row["kind"] == "encoder":
        as_image = h100.encoder_s(np.array([Modality.IMAGE.index]), np.array([row["prefill_tokens"]]))
        frames = np.array([row["images"] * VIDEO_TOKENS_PER_FRAME])
        as_video = h100.encoder_s(np.array([Modality.VIDEO.index]), frames)
        return {"as image crops": float(as_image[0]), "as video frames": float(as_video[0])}
    steps = {
        name: timing.step_s(row["prefill_tokens"], row["decodes"], row["decode_context"], 0.0)
        for name, timing in (("H100", h100), ("H200 bandwidth", h200))
    }
    return steps if row["decodes"] else {"H100": steps["H100"]}


def _describe(row: dict[str, Any]) -> str:
    if row["kind"] == "encoder":
        return f"encoder, {row['images']} images"
    parts = []
    if row["prefill_tokens"]:
        parts.append(
            f"{row['prefill_tokens']} prefill" + (f" after {row['context']}" if row["context"] else "")
        )
    if row["decodes"]:
        parts.append(f"{row['decodes']} decodes of {row['decode_context'] // row['decodes']}")
    return f"{row['kind']}: " + " + ".join(parts)


def comparison_table(result: dict[str, Any]) -> str:
    """Markdown: every row measured and predicted (ms), and each shape's fitted prefill line."""
    lines = [f"Measured on {result['device']} (torch {result['torch']}); simulator in graph mode.", ""]
    for name, measured in result["shapes"].items():
        reference = measured["shape"]["reference"]
        lines += [
            f"### {name} (simulator: {reference})",
            "",
            "| step | measured ms | simulator ms | ratio |",
            "|---|---:|---:|---:|",
        ]
        h100, h200 = simulated(reference, H100), simulated(reference, H200_BANDWIDTH)
        for row in measured["rows"]:
            for label, seconds in predictions(row, h100, h200).items():
                ratio = f"{row['seconds'] / seconds:.2f}" if seconds > 0 else "-"
                measured_ms, predicted_ms = row["seconds"] * 1e3, seconds * 1e3
                lines.append(
                    f"| {_describe(row)} | {measured_ms:.2f} | {predicted_ms:.2f} ({label}) | {ratio} |"
                )
        prefill = [row for row in measured["rows"] if row["kind"] == "prefill"]
        if len(prefill) >= 2:
            fitted = fit_line(
                np.array([row["prefill_tokens"] for row in prefill], dtype=float),
                np.array([row["seconds"] for row in prefill]),
            )
            text = reference_model(reference).lines[Modality.TEXT]
            lines += [
                "",
                f"prefill line measured: {fitted.intercept * 1e3:.2f} ms + {fitted.slope * 1e6:.2f} us/token;"
                " "
                f"the simulator's text line: {text.intercept * 1e3:.2f} ms + {text.slope * 1e6:.2f} us/token",
            ]
        lines.append("")
    return "\n".join(lines)
