"""NVIDIA perf_analyzer on the ensemble: text, image and video requests at rising concurrency.

Starts the local tritonserver on the model repository (policy from model.json unless --policy),
runs perf_analyzer (`-i grpc --streaming --async`: first-response latency of the decoupled ensemble)
once per modality with the input files of `rps-serve perf-inputs`, and writes the CSVs, the logs and
`perf.json` under --out. `make perf` does all of it on a fresh checkout. With --genai-perf, NVIDIA's
GenAI-Perf (over the same perf_analyzer) then profiles synthetic text at each concurrency level:
its exports under --out/genai-perf, its numbers in `perf.json` (`make genai-perf`, without the
perf_analyzer modalities).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rps_harness.loadtest.genai_perf import GenAIPerfRun, run_genai_perf
from rps_harness.loadtest.perf_analyzer import PerfRun, ensure_perf_analyzer, run_perf_analyzer
from rps_harness.local.checkout import REPOSITORY, TINY_MODEL
from rps_harness.local.repository import ensure_cost_models, ensure_tiny_model
from rps_harness.local.server import EngineSettings, launch_server
from rps_serve.requests import Modality
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment


def _row(modality: Modality, row: dict[str, str]) -> dict[str, Any]:
    return {
        "modality": modality.value,
        "concurrency": int(row["Concurrency"]),
        "requests_per_s": float(row["Inferences/Second"]),
        "responses_per_s": float(row["Response Throughput"]),
        **{f"{q}_first_response_ms": int(row[f"{q} latency"]) / 1000 for q in ("p50", "p90", "p99")},
    }


def _levels(concurrency: str) -> list[int]:
    """perf_analyzer's `start:end:step` range (or a comma-separated list) as its levels."""
    if ":" not in concurrency:
        return [int(level) for level in concurrency.split(",")]
    start, end, step = ([*map(int, concurrency.split(":")), 1])[:3]
    return list(range(start, end + 1, step))


def _genai_perf(args: argparse.Namespace, url: str, binary: Path, rows: list[dict[str, Any]]) -> str | None:
    """GenAI-Perf on text at each concurrency level, its summaries appended to `rows`; the failure
    that stopped it, if one did."""
    for level in _levels(args.concurrency):
        out = args.out.resolve() / "genai-perf" / f"concurrency{level}"
        run = GenAIPerfRun(url, "rps_ensemble", TINY_MODEL.resolve(), out / "artifacts", concurrency=level,
                           requests=args.genai_perf_requests, output_tokens=16)  # fmt: skip
        print(" ".join(run.command(args.genai_perf)), flush=True)
        try:
            result = run_genai_perf(args.genai_perf, binary, run, out / "genai-perf.log", args.timeout_s)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failure = f"genai-perf at concurrency {level}: {error}"
            print(failure, file=sys.stderr)
            return failure
        rows.append({"concurrency": level, **result.summary()})
        if result.errors or result.unanswered:
            failure = f"genai-perf at concurrency {level}: errors or unanswered requests, see {out}"
            print(failure, file=sys.stderr)
            return failure
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inputs", type=Path, help="directory of `rps-serve perf-inputs`")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repository", type=Path, default=REPOSITORY)
    parser.add_argument("--policy", help="override model.json's policy")
    parser.add_argument("--concurrency", default="1:4:1", help="perf_analyzer --concurrency-range")
    parser.add_argument("--measurement-ms", type=int, default=10000)
    parser.add_argument("--binary-dir", type=Path, default=Path("build/perf_analyzer"))
    parser.add_argument("--modalities", default="text,image,video", help="comma-separated, in this order")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per modality")
    parser.add_argument("--genai-perf", type=Path, help="GenAI-Perf's executable: also profile text with it")
    parser.add_argument("--genai-perf-requests", type=int, default=60, help="requests per concurrency level")
    args = parser.parse_args()
    modalities = [Modality(m.strip()) for m in args.modalities.split(",") if m.strip()]
    if modalities and args.inputs is None:
        parser.error("--inputs is needed for perf_analyzer's modalities")

    binary = ensure_perf_analyzer(args.binary_dir)
    ensure_tiny_model(TINY_MODEL)
    ensure_cost_models(args.repository, TINY_MODEL)
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = args.out.resolve() / "server"
    workdir.mkdir(exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    engines = EngineSettings(model=TINY_MODEL, policy=args.policy or None)
    rows: list[dict[str, Any]] = []
    genai_rows: list[dict[str, Any]] = []
    failure = None
    with launch_server(args.repository, workdir, engines, args.out / "tritonserver.log") as endpoints:
        for modality in modalities:
            run = PerfRun(
                url=endpoints.grpc_url,
                model="rps_ensemble",
                input_data=args.inputs / f"{modality.value}.json",
                csv_out=args.out / f"{modality.value}.csv",
                concurrency=args.concurrency,
                measurement_ms=args.measurement_ms,
            )
            print(" ".join(run.command(binary)), flush=True)
            try:
                measured = run_perf_analyzer(binary, run, args.out / f"{modality.value}.log", args.timeout_s)
            except (RuntimeError, subprocess.TimeoutExpired) as error:
                # A server that stopped answering fails every later modality too: keep what was measured.
                failure = f"{modality.value}: {error}"
                print(failure, file=sys.stderr)
                break
            # perf_analyzer orders its CSV by throughput; the report goes by concurrency.
            rows.extend(sorted((_row(modality, row) for row in measured), key=lambda r: r["concurrency"]))
        if args.genai_perf and failure is None:
            failure = _genai_perf(args, endpoints.grpc_url, binary, genai_rows)
    report = {"command": sys.argv, "policy": args.policy or "model.json", "results": rows, "failure": failure}
    if args.genai_perf:
        report["genai_perf"] = genai_rows
    (args.out / "perf.json").write_text(json.dumps(report, indent=1) + "\n")
    if rows:
        print(f"{'modality':<8} {'conc':>4} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for r in rows:
        print(
            f"{r['modality']:<8} {r['concurrency']:>4} {r['requests_per_s']:7.2f}"
            + "".join(f" {r[f'{q}_first_response_ms']:8.1f}" for q in ("p50", "p90", "p99"))
        )
    for g in genai_rows:
        ttft, itl = g["time_to_first_token_ms"], g["inter_token_latency_ms"]
        print(
            f"genai-perf text, concurrency {g['concurrency']}: {g['requests_per_s']:.2f} req/s, TTFT p50 "
            f"{ttft['p50']:.1f} ms, p99 {ttft['p99']:.1f} ms, inter-token {itl['avg']:.1f} ms, "
            f"{g['errors']} errors"
        )
    print(f"wrote {args.out / 'perf.json'}")
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main())
