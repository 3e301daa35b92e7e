"""`rps-serve` command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rps_serve.cost.classifier import MAX_CLASSES, MIN_CLASSES, MemoryFeature
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.cost.training import REPORT_FILE, TrainingOptions, train_cost_model
from rps_serve.profiles.records import read_records
from rps_serve.profiles.reference import reference_model_names
from rps_serve.profiles.synthetic import reference_profile
from rps_serve.requests import Modality, RequestClass, RequestFeatures
from rps_serve.scheduling.parameters import Policy
from rps_serve.sim.run import SimulationConfig, run_simulation
from rps_serve.sim.simulator import POLICY_VARIANTS
from rps_serve.triton.client import Tally
from rps_serve.workload.mixes import MIXES, mix_by_name
from rps_serve.workload.trace import generate_trace, write_trace


def _train(args: argparse.Namespace) -> int:
    if args.profile_data:
        records = list(read_records(args.profile_data))
        source = f"profile data {args.profile_data.name}"
    else:
        records = reference_profile(args.model, per_kind=args.per_kind, seed=args.seed)
        source = f"reference profile {args.model} (published H100 fits, synthesized records)"
    options = TrainingOptions(
        num_classes=args.classes,
        power_transform=args.power_transform,
        memory_feature=MemoryFeature(args.memory_feature),
        seed=args.seed,
    )
    report = train_cost_model(records, args.out, options, source)
    print(f"trained on {report['records']} records from {source}")
    for modality, mae in report["estimator"]["mae_s"].items():
        print(f"  prefill MAE {modality:<5} {mae * 1000:8.2f} ms")
    for entry in report["classifier"]["classes"]:
        by_modality = ", ".join(f"{m} {n}" for m, n in entry["count_by_modality"].items())
        print(f"  class {entry['level']} {entry['name']:<7} {entry['count']:6d} records ({by_modality})")
    print(f"wrote {args.out}/{{impact_estimator,request_classifier}}/1/model.onnx and {REPORT_FILE}")
    return 0


def _request(spec: str) -> RequestFeatures:
    """MODALITY:PROMPT_TOKENS[:MODALITY_TOKENS], e.g. text:200 or video:6300:6272."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"{spec!r}: expected MODALITY:PROMPT_TOKENS[:MODALITY_TOKENS]")
    try:
        tokens = [int(p) for p in parts[1:]]
        return RequestFeatures(Modality(parts[0]), *tokens)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{spec!r}: {error}") from None


def _classify(args: argparse.Namespace) -> int:
    model = OnnxCostModel.from_repository(args.repository)
    print(f"{'request':<20} {'prefill ms':>10} {'KV tokens':>10}  class")
    for request, verdict in zip(args.requests, model.assess(args.requests), strict=True):
        name = RequestClass.for_level(verdict.level, model.num_classes).label
        spec = f"{request.modality.value}:{request.prompt_tokens}"
        print(
            f"{spec:<20} {verdict.estimate.prefill_s * 1000:10.1f} {verdict.estimate.memory_tokens:10d}"
            f"  {verdict.level} {name}"
        )
    return 0


def _make_tiny_model(args: argparse.Namespace) -> int:
    from rps_serve.tiny_model import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(
        layers=args.layers,
        hidden=args.hidden,
        image_size=args.image_size,
        video_size=args.video_size,
        video_frames=args.video_frames,
        seed=args.seed,
    )
    build_tiny_model(args.out, spec)
    print(
        f"wrote {args.out}: {spec.layers} layers, hidden {spec.hidden}; an image is {spec.image_tokens} "
        f"placeholder tokens, a {spec.video_frames}-frame video {spec.video_tokens}"
    )
    return 0


def _print_table(report: dict[str, Any]) -> None:
    print(
        f"{'policy':<14} {'text p90':>9} {'text p99':>9} {'text mean':>9} {'image mean':>10}"
        f" {'video mean':>10} {'norm mean':>9} {'util':>5} {'done':>6} {'preempt':>7}"
    )
    for policy, result in report["results"].items():
        ttft = {m: result["by_modality"][m]["ttft"] for m in ("text", "image", "video")}
        cells = [
            ttft["text"]["p90"],
            ttft["text"]["p99"],
            ttft["text"]["mean"],
            ttft["image"]["mean"],
            ttft["video"]["mean"],
        ]
        shown = " ".join(
            f"{'-' if v is None else f'{v:.3f}':>{w}}" for v, w in zip(cells, (9, 9, 9, 10, 10), strict=True)
        )
        # A real engine reports no utilization or preemption count here (they live in the engine core).
        utilization = f"{result['utilization']:5.2f}" if "utilization" in result else f"{'-':>5}"
        preemptions = f"{result['preemptions']:7d}" if "preemptions" in result else f"{'-':>7}"
        print(
            f"{policy:<14} {shown} {result['overall']['norm_latency']['mean']:9.4f}"
            f" {utilization} {result['completed']:6d} {preemptions}"
        )
    print("TTFT and normalized latency (s per output token) in seconds")


def _simulate(args: argparse.Namespace) -> int:
    if args.trace is None and args.rate is None:
        raise ValueError("give --rate (with --mix, --requests) or --trace FILE")
    config = SimulationConfig(
        profile=args.profile,
        gpus=args.gpus,
        mix=args.mix,
        rate=args.rate or 0.0,
        requests=args.requests,
        seed=args.seed,
        classes=args.classes,
        burst_cv=args.burst_cv,
        model=args.model,
        profile_gpus=args.profile_gpus,
        trace=str(args.trace) if args.trace else None,
    )
    policies = _names(args.policies)
    report, outcomes = run_simulation(config, policies)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    _print_table(report)
    print(f"wrote {args.json}")
    if args.plot:
        from rps_serve.sim.plots import plot_ttft_cdf

        title = f"{args.profile}, {args.gpus} GPU, {args.mix} at {args.rate:g} req/s"
        plot_ttft_cdf({name: outcome.records for name, outcome in outcomes.items()}, args.plot, title)
        print(f"wrote {args.plot}")
    return 0


def _profile(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from rps_serve.profiler.isolated import IsolatedProfiler, profiling_engine
    from rps_serve.profiler.plan import ProfilePlan
    from rps_serve.tiny_model import TinyModelSpec
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    done = sum(1 for _ in read_records(args.out)) if args.out.exists() else 0
    if done and not args.resume:
        raise ValueError(f"{args.out} already holds {done} records; pass --resume to continue it")
    plan = ProfilePlan(repeats=args.repeats)
    items = plan.items()[done:]
    configure_cpu_engine_environment(args.out.parent / ".vllm")
    engine, timer = profiling_engine(args.model, args.max_model_len)
    profiler = IsolatedProfiler(
        engine, timer, TinyModelSpec.load(args.model), plan.output_tokens, args.seed + done
    )
    for warm_up in plan.items()[:2]:  # first calls pay one-off initialization
        profiler.run(warm_up)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", encoding="utf-8") as out:
        for item in tqdm(items, desc="isolated runs", unit="request"):
            out.write(profiler.run(item).to_json() + "\n")
            out.flush()
    print(f"{args.out}: {done + len(items)} records ({len(items)} new)")
    return 0


def _ab(args: argparse.Namespace) -> int:
    from rps_serve.vllm_plugin.ab import ABConfig, run_ab
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    configure_cpu_engine_environment(args.json.parent / ".vllm")
    rps_settings = {} if args.chunk_cap is None else {"chunk_cap_tokens": args.chunk_cap}
    config = ABConfig(
        model=args.model,
        mix=args.mix,
        rate=args.rate,
        requests=args.requests,
        policies=tuple(Policy.parse(p) for p in _names(args.policies)),
        repeats=args.repeats,
        seed=args.seed,
        burst_cv=args.burst_cv,
        cost_model=args.cost_model,
        renderer_num_workers=args.renderer_workers,
        rps_settings=rps_settings,
    )
    report = run_ab(config)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    _print_table(report)
    print(f"pooled over {config.repeats} runs per policy; wrote {args.json}")
    return 0


def _trace(args: argparse.Namespace) -> int:
    trace = generate_trace(mix_by_name(args.mix), args.rate, args.requests, args.seed, args.burst_cv)
    write_trace(args.out, trace)
    print(f"wrote {len(trace)} requests over {trace.arrival_s[-1]:.1f} s to {args.out}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rps_serve.triton.repository import TINY_MODEL, ensure_cost_models, ensure_tiny_model
    from rps_serve.triton.server import Ports, local_server
    from rps_serve.triton.settings import MODEL_ENV, POLICY_ENV
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    if ensure_cost_models(args.repository):
        print(f"trained the cost models into {args.repository}")
    env = {POLICY_ENV: args.policy} if args.policy else {}
    if args.model:
        env[MODEL_ENV] = str(args.model.resolve())
    elif ensure_tiny_model(TINY_MODEL):
        print(f"built the tiny model into {TINY_MODEL}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    configure_cpu_engine_environment(args.workdir.resolve() / "vllm")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"starting tritonserver on {args.repository} (log: {args.workdir / 'tritonserver.log'})")
    ports = Ports(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port)
    with local_server(
        args.repository, args.workdir.resolve(), env=env, load_timeout_s=args.load_timeout_s, ports=ports
    ) as endpoints:
        print(
            f"ready: gRPC {endpoints.grpc_url}, HTTP {endpoints.http_url}, metrics {endpoints.metrics_url}"
            " (Ctrl-C stops)",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


def _repository_and_model(args: argparse.Namespace) -> Path:
    """The model a local server runs (`--model`, else the tiny model, built if missing), with the
    repository's cost models trained if they are missing."""
    from rps_serve.triton.repository import TINY_MODEL, ensure_cost_models, ensure_tiny_model

    ensure_cost_models(args.repository)
    if args.model is not None:
        return Path(args.model)
    ensure_tiny_model(TINY_MODEL)
    return TINY_MODEL


def _demo(args: argparse.Namespace) -> int:
    from rps_serve.bench.demo import DemoConfig, ratio_table, run_demo, save_results, stage_table, ttft_table

    model = _repository_and_model(args)
    config = DemoConfig(
        repository=args.repository,
        model=model,
        out=args.out,
        policies=_names(args.policies),
        mix=args.mix,
        rates=[float(r) for r in _names(args.rate or "")],
        load_fractions=[float(f) for f in _names(args.load_fraction)],
        repeats=args.repeats,
        calibrate_s=args.calibrate_s,
        requests=args.requests,
        seed=args.seed,
    )
    pace = (
        f"at {args.rate} req/s"
        if config.rates
        else f"at {args.load_fraction}x the rate this machine sustains (measured first, "
        f"{config.calibrate_s:g} s closed-loop)"
    )
    runs = "once" if config.repeats == 1 else f"{config.repeats} times, interleaved,"
    print(
        f"replaying {config.requests} {config.mix} requests {pace} through rps_ensemble, {runs} per "
        f"policy ({', '.join(config.policies)}), each on a fresh tritonserver; classes from the cost "
        f"model in {args.repository}, trained on {_cost_model_source(args.repository)}",
        flush=True,
    )
    demo = run_demo(config)
    if demo.capacity is not None:
        capacity = demo.capacity
        print(
            f"sustained {capacity.rate:.2f} req/s ({capacity.completed} completed in "
            f"{capacity.duration_s:g} s with {capacity.concurrency} in flight)"
        )
    for load in demo.loads:
        print(f"\n{load.name}, {config.repeats} run(s) per policy pooled")
        records = load.records()
        print(ttft_table(records))
        print(ratio_table(records, candidate="rps"))
        print(stage_table(load.stages()))
        for policy, tally in load.tallies().items():
            print(f"{policy}: {tally}")
    print("wrote " + ", ".join(str(path) for path in save_results(demo, config)))
    return _lost_exit_code(demo.tallies())


def _names(value: str) -> list[str]:
    """The items of a comma-separated list."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _cost_model_source(repository: Path) -> str:
    """What the repository's cost model was trained on, from its report."""
    try:
        return str(json.loads((repository / REPORT_FILE).read_text())["source"])
    except (OSError, ValueError, KeyError):
        return "(no report)"


def _lost_exit_code(tallies: Sequence[Tally]) -> int:
    """1 (and a message) if any request got no answer: something hung; else 0."""
    lost = sum(t.lost for t in tallies)
    if lost:
        print(f"{lost} requests got no final response before the deadline", file=sys.stderr)
    return 1 if lost else 0


def _soak(args: argparse.Namespace) -> int:
    from rps_serve.bench.soak import CYCLE_HEADER, SoakConfig, cycle_row, run_soak
    from rps_serve.tiny_model import TinyModelSpec
    from rps_serve.triton.server import local_server
    from rps_serve.triton.settings import MODEL_ENV
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    model = _repository_and_model(args)
    config = SoakConfig(
        duration_s=args.minutes * 60,
        cycles=args.cycles,
        rate=args.rate,
        rate_factor=args.rate_factor,
        calibrate_s=args.calibrate_s,
        mix=args.mix,
        seed=args.seed,
    )
    workdir = (args.out / "server").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    env = {MODEL_ENV: str(model.resolve())}
    print(f"starting tritonserver (log: {workdir / 'tritonserver.log'})")
    with local_server(args.repository, workdir, env=env) as endpoints:
        print(
            f"soak: {config.mix} through rps_ensemble, {config.cycles} cycles of {config.cycle_s / 60:g} min "
            f"at {config.rate_factor:g}x "
            + (
                f"{config.rate:g} req/s"
                if config.rate
                else f"the rate measured over {config.calibrate_s:g} s"
            )
        )
        report = run_soak(endpoints, TinyModelSpec.load(model), config)
    result = report.to_json()
    (args.out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"sustainable {report.sustainable_rate:.2f} req/s, offered {report.offered_rate:.2f} req/s, "
        f"{config.cycles} cycles of {config.cycle_s:g} s"
    )
    print(f"cycle {CYCLE_HEADER}")
    for n, cycle in enumerate(report.cycles, 1):
        print(f"{n:5d} {cycle_row(cycle)}")
        print(f"      RSS after the drain: {_gigabytes(cycle.rss_drained_by_process)}")
        print(f"      of which shared memory: {_gigabytes(cycle.shm_drained_by_stub)}")
    print(f"resident memory growth, drained after the last cycle vs the first: {report.rss_growth:+.1%}")
    print("\n".join(report.failures()) or "all checks passed")
    print(f"wrote {args.out / 'soak.json'}")
    return 1 if report.failures() else 0


def _bench(args: argparse.Namespace) -> int:
    from rps_serve.bench.demo import stage_table, ttft_table
    from rps_serve.bench.load import BenchConfig, run_bench
    from rps_serve.triton.repository import TINY_MODEL

    if args.trace is None and args.rate is None:
        raise ValueError("give --rate (with --mix, --requests) or --trace FILE")
    config = BenchConfig(
        url=args.url,
        model=args.model or TINY_MODEL,
        mix=args.mix,
        rate=args.rate or 0.0,
        requests=args.requests,
        seed=args.seed,
        burst_cv=args.burst_cv,
        trace=args.trace,
        label=args.label,
        max_text_tokens=args.max_text_tokens,
        max_output_tokens=args.max_output_tokens,
        isolated=args.isolated,
        slo=args.slo,
        progress=not args.no_progress,
        metrics_url=args.metrics_url,
    )
    run = run_bench(config)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(run.report, indent=1) + "\n")
    print(ttft_table({config.label: run.records}))
    if args.metrics_url:
        print(stage_table({config.label: run.report["results"][config.label]["stages"]}))
    print(f"requests: {run.tally}")
    result = run.report["results"][config.label]
    utilization = result["utilization"]
    shown = "unavailable" if utilization is None else f"{utilization:.2f}"
    print(f"GPU utilization (time-averaged): {shown}")
    for scale in ("1x", "2x", "4x"):
        slo = result["slo"][scale]
        print(
            f"SLO {scale}: goodput {slo['goodput_rps']:.2f} req/s, violations {slo['violation_rate']:.1%}, "
            f"severity {slo['severity']:.2f}"
        )
    print(f"wrote {args.json}")
    if args.plot:
        from rps_serve.sim.plots import plot_ttft_cdf

        plot_ttft_cdf({config.label: run.records}, args.plot, f"{config.label} at {args.url}")
        print(f"wrote {args.plot}")
    return _lost_exit_code([run.tally])


def _perf_inputs(args: argparse.Namespace) -> int:
    from rps_serve.bench.perf_inputs import perf_input_files
    from rps_serve.tiny_model import TinyModelSpec
    from rps_serve.triton.repository import TINY_MODEL

    media = TinyModelSpec.load(args.model or TINY_MODEL)
    files = perf_input_files(args.out, media, args.per_modality, args.seed, args.max_tokens)
    for modality, path in files.items():
        print(f"{modality.value:<6} {path}")
    return 0


def _gigabytes(bytes_by_name: dict[str, int]) -> str:
    return ", ".join(f"{name} {value / 1e9:.2f} GB" for name, value in sorted(bytes_by_name.items()))


def _add_workload_arguments(parser: argparse.ArgumentParser, rate_required: bool = True) -> None:
    parser.add_argument("--mix", default="mixed-iii", choices=list(MIXES), help="request-kind mix")
    parser.add_argument(
        "--rate", type=float, required=rate_required, help="mean arrival rate, requests per second"
    )
    parser.add_argument("--requests", type=int, default=1000, help="number of requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--burst-cv", type=float, help="Gamma arrivals with this coefficient of variation instead of Poisson"
    )


def _add_local_server_arguments(parser: argparse.ArgumentParser) -> None:
    """What `_repository_and_model` reads: the repository to serve and the model to run."""
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument(
        "--model", type=Path, help="model directory (default: the tiny model, built if missing)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rps-serve", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser(
        "train", help="fit the Impact Estimator and Request Classifier, export them to ONNX"
    )
    train.add_argument(
        "--model",
        default="llava-onevision-qwen2-7b",
        choices=reference_model_names(),
        help="reference profile used when --profile-data is not given",
    )
    train.add_argument("--profile-data", type=Path, help="JSONL profile records (rps-serve profile)")
    train.add_argument("--out", type=Path, required=True, help="model repository to write into")
    train.add_argument(
        "--classes", type=int, default=3, choices=range(MIN_CLASSES, MAX_CLASSES + 1), help="k of k-means"
    )
    train.add_argument("--power-transform", action="store_true", help="Yeo-Johnson before scaling")
    train.add_argument(
        "--memory-feature",
        default=MemoryFeature.PREFILL_TOKENS.value,
        choices=[m.value for m in MemoryFeature],
        help="memory coordinate of the classifier",
    )
    train.add_argument("--per-kind", type=int, default=500, help="records per request kind (reference)")
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(handler=_train)

    classify = commands.add_parser("classify", help="estimate and classify requests with the ONNX cost model")
    classify.add_argument("--repository", type=Path, required=True, help="where `train` wrote the models")
    classify.add_argument(
        "requests", nargs="+", type=_request, metavar="MODALITY:PROMPT_TOKENS[:MODALITY_TOKENS]"
    )
    classify.set_defaults(handler=_classify)

    tiny = commands.add_parser(
        "make-tiny-model", help="build a tiny random Qwen2-VL offline (tests, CPU demo)"
    )
    tiny.add_argument("out", type=Path)
    tiny.add_argument("--layers", type=int, default=4)
    tiny.add_argument("--hidden", type=int, default=256)
    tiny.add_argument("--image-size", type=int, default=672, help="images are resized to this square")
    tiny.add_argument("--video-size", type=int, default=448, help="video frames are resized to this square")
    tiny.add_argument("--video-frames", type=int, default=24, help="frames per video the model expects")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(handler=_make_tiny_model)

    simulate = commands.add_parser(
        "simulate", help="simulate the vLLM V1 engine at H100 scale under several policies"
    )
    simulate.add_argument(
        "--profile",
        default="llava-onevision-qwen2-7b",
        help=f"reference model ({', '.join(reference_model_names())}), a JSONL profile file or a measured"
        " profile (.json, benchmarks/fidelity.py)",
    )
    simulate.add_argument("--gpus", type=int, default=1, help="GPUs (tensor parallel; modserve splits them)")
    _add_workload_arguments(simulate, rate_required=False)
    simulate.add_argument(
        "--trace", type=Path, help="simulate this trace (rps-serve trace) instead of --mix/--rate"
    )
    simulate.add_argument(
        "--policies", default="fcfs,rps", help=f"comma-separated, from {', '.join(POLICY_VARIANTS)}"
    )
    simulate.add_argument(
        "--classes", type=int, default=3, choices=range(MIN_CLASSES, MAX_CLASSES + 1), help="k of k-means"
    )
    simulate.add_argument(
        "--model",
        default="llava-onevision-qwen2-7b",
        choices=reference_model_names(),
        help="model sizes (weights, KV per token) for a --profile file",
    )
    simulate.add_argument("--profile-gpus", type=int, default=1, help="GPUs a --profile file was measured on")
    simulate.add_argument("--json", type=Path, required=True, help="where to write the results")
    simulate.add_argument("--plot", type=Path, help="also draw TTFT CDFs per modality and policy (PNG)")
    simulate.set_defaults(handler=_simulate)

    profile = commands.add_parser("profile", help="isolated runs on a real vLLM engine -> profile records")
    profile.add_argument(
        "--model", type=Path, required=True, help="model built by `rps-serve make-tiny-model`"
    )
    profile.add_argument("--out", type=Path, required=True, help="JSONL profile records")
    profile.add_argument("--repeats", type=int, default=3, help="runs of every planned request")
    profile.add_argument("--max-model-len", type=int, default=8192)
    profile.add_argument("--resume", action="store_true", help="continue a partly written profile")
    profile.add_argument("--seed", type=int, default=0)
    profile.set_defaults(handler=_profile)

    ab = commands.add_parser("ab", help="policies side by side on a real vLLM engine (fresh engine per run)")
    ab.add_argument("--model", type=Path, required=True, help="model built by `rps-serve make-tiny-model`")
    _add_workload_arguments(ab)
    ab.add_argument(
        "--policies",
        default="fcfs,vllm-priority,rps",
        help=f"comma-separated, from {', '.join(p.value for p in Policy)}",
    )
    ab.add_argument("--repeats", type=int, default=3, help="runs per policy, interleaved")
    ab.add_argument(
        "--cost-model", type=Path, help="ONNX cost model repository (default: classes by modality)"
    )
    ab.add_argument(
        "--renderer-workers", type=int, default=1, help="vLLM renderer threads (media preprocessing)"
    )
    ab.add_argument("--chunk-cap", type=int, help="prefill chunk cap while a lighter class waits (0: off)")
    ab.add_argument("--json", type=Path, required=True)
    ab.set_defaults(handler=_ab)

    trace = commands.add_parser(
        "trace", help="write a workload trace (JSONL) for the simulator or load client"
    )
    _add_workload_arguments(trace)
    trace.add_argument("--out", type=Path, required=True)
    trace.set_defaults(handler=_trace)
    serve = commands.add_parser("serve", help="run the model repository on a local tritonserver (127.0.0.1)")
    serve.add_argument("--repository", type=Path, default=Path("model_repository"), help="model repository")
    serve.add_argument(
        "--model", type=Path, help="model directory (default: model.json's, the tiny model, built if missing)"
    )
    serve.add_argument("--policy", choices=[p.value for p in Policy], help="override model.json's policy")
    serve.add_argument("--workdir", type=Path, default=Path("build/serve"), help="server tree, sockets, log")
    for name, default in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        serve.add_argument(
            f"--{name}-port", type=int, default=default, help=f"{name} port on 127.0.0.1 (0: a free one)"
        )
    serve.add_argument(
        "--load-timeout-s",
        type=float,
        default=900.0,
        help="fail (naming the model, with the log's tail) if a model is not loaded by then",
    )
    serve.set_defaults(handler=_serve)

    demo = commands.add_parser(
        "demo", help="replay a mixed workload through the local tritonserver under FCFS and RPS"
    )
    _add_local_server_arguments(demo)
    demo.add_argument(
        "--policies", default="fcfs,vllm-priority,rps", help="comma-separated; one server run each"
    )
    demo.add_argument("--mix", default="mixed-iii", choices=list(MIXES))
    demo.add_argument(
        "--rate", help="arrival rates, requests per second, comma-separated (default: measured, see below)"
    )
    demo.add_argument(
        "--load-fraction",
        default="0.7",
        help="without --rate: these x the measured sustained rate, comma-separated (e.g. 0.6,0.9)",
    )
    demo.add_argument("--repeats", type=int, default=1, help="runs per policy and load, interleaved")
    demo.add_argument("--calibrate-s", type=float, default=60.0, help="how long to measure the rate")
    demo.add_argument("--requests", type=int, default=120)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="results, plot and server logs")
    demo.set_defaults(handler=_demo)

    soak = commands.add_parser(
        "soak", help="overload the local tritonserver with a mixed workload; check nothing is lost or leaks"
    )
    _add_local_server_arguments(soak)
    soak.add_argument(
        "--minutes", type=float, default=20.0, help="time under load over all cycles (drains on top)"
    )
    soak.add_argument(
        "--cycles", type=int, default=4, help="load-and-drain cycles; the first is the warm-up (>= 2)"
    )
    soak.add_argument(
        "--rate", type=float, help="rate the server sustains, req/s (default: measured closed-loop first)"
    )
    soak.add_argument("--rate-factor", type=float, default=1.5, help="offered load = this x the rate")
    soak.add_argument("--calibrate-s", type=float, default=120.0, help="how long to measure the rate")
    soak.add_argument("--mix", default="mixed-iii", choices=list(MIXES))
    soak.add_argument("--seed", type=int, default=0)
    soak.add_argument("--out", type=Path, default=Path("out/soak"), help="soak.json and the server log")
    soak.set_defaults(handler=_soak)

    bench = commands.add_parser(
        "bench", help="replay a workload against a running server (rps-serve serve); simulate's JSON"
    )
    bench.add_argument("--url", required=True, help="gRPC HOST:PORT (rps-serve serve prints it)")
    bench.add_argument(
        "--metrics-url",
        help="the server's metrics endpoint (http://HOST:PORT/metrics): where each class waited",
    )
    _add_workload_arguments(bench, rate_required=False)
    bench.add_argument(
        "--trace", type=Path, help="replay this trace (rps-serve trace) instead of --mix/--rate"
    )
    bench.add_argument(
        "--model", type=Path, help="served model directory, for media sizes (default: the tiny model)"
    )
    bench.add_argument("--label", default="server", help="results key in the JSON, e.g. the policy")
    bench.add_argument("--max-text-tokens", type=int, default=4096, help="cap on a prompt's text tokens")
    bench.add_argument("--max-output-tokens", type=int, help="cap on output tokens (default: the trace's)")
    bench.add_argument(
        "--isolated", type=int, default=3, help="requests per modality sent alone for the SLOs"
    )
    bench.add_argument("--slo", type=Path, help='TTFT SLOs from a file {"text": s, "image": s, "video": s}')
    bench.add_argument("--json", type=Path, required=True)
    bench.add_argument("--plot", type=Path, help="also draw TTFT CDFs per modality (PNG)")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.set_defaults(handler=_bench)

    perf_inputs = commands.add_parser(
        "perf-inputs", help="perf_analyzer --input-data files for rps_ensemble (text, image, video)"
    )
    perf_inputs.add_argument("--out", type=Path, required=True, help="directory for text/image/video.json")
    perf_inputs.add_argument(
        "--model", type=Path, help="served model directory, for media sizes (default: the tiny model)"
    )
    perf_inputs.add_argument("--per-modality", type=int, default=8, help="requests per file")
    perf_inputs.add_argument("--max-tokens", type=int, default=16, help="output tokens per request")
    perf_inputs.add_argument("--seed", type=int, default=0)
    perf_inputs.set_defaults(handler=_perf_inputs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    try:
        return int(args.handler(args))
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        # Bad arguments, a missing file, a server that failed to start or to serve: a message, no traceback.
        print(f"rps-serve {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
