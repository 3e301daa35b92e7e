"""The demo, and the policy comparison through Triton: the same mixed workloads through the local
Triton server under each policy, measured so that policies can be told apart on a small, noisy machine.

The method:
- placement: the engine's worker on a core of its own, everything else (tritonserver, the stubs,
  vLLM's EngineCore, this load client) on the others (`loadtest.placement`), as a GPU is its own
  device; every run records which process ran where and the CPU seconds it used;
- load: open-loop Poisson at fractions of the open-loop capacity, the highest rate at which FCFS's
  backlog stays bounded, bracketed by a probe where it grew (`loadtest.capacity`); where no probe
  found it growing, the loads are fractions of a lower bound, and say so;
- evidence: `repeats` seeds, fixed before the first run (`run_plan`, written to `plan.json`), each
  a trace every policy replays (paired) holding the mix's proportions and the rate exactly
  (stratified); each seed's policies run back to back, in the reverse order of the seed before
  (`run_order`), so that a drift of the machine lands on no policy more than another; every run is
  kept: none is added, repeated or dropped after its outcome is seen; only the steady state counts
  (arrivals after the first `warm_up` of a run's, 10% unless set, and before its last 10%); every
  ratio carries a 95% interval over seeds
  (`rps_harness.comparison`); every run's machine speed is recorded beside it, and acted on nowhere;
- servers: a fresh one per policy's runs, or (`one_server`) one for every run holding an engine per
  policy, each behind its own ensemble (`local.repository.policy_repository`), which switches
  policy without a start; an idle engine does not spin, so the one serving has its core alone;
- where time goes: each engine writes a run log (`triton.run_log`): per engine step, the loop's lag,
  and each request's stages, summarized over the steady window (`loadtest.run_analysis`).

This module runs the experiment and writes its records (`demo_records`); `demo_analysis` judges
them, `demo_report` and `tables` report them.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_harness.comparison import steady
from rps_harness.loadtest.capacity import (
    Capacity,
    OpenLoopCapacity,
    measure_capacity,
    request_stream,
    search_open_loop_capacity,
)
from rps_harness.loadtest.demo_records import DemoRuns, LoadRuns, PolicyRun
from rps_harness.loadtest.load import BenchConfig, run_bench
from rps_harness.loadtest.placement import Placement, process_usage, usage_during
from rps_harness.loadtest.replay import Replayed, build_requests, replay
from rps_harness.loadtest.run_analysis import summarize
from rps_harness.loadtest.server_stats import ServedFit, scrape
from rps_harness.local.repository import engine_model, ensemble_model, policy_models, policy_repository
from rps_harness.local.server import Endpoints, EngineSettings, launch_server
from rps_harness.metrics import STEADY_STATE_TRIM
from rps_harness.sim.simulator import served_settings
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.source import SyntheticWorkload
from rps_serve.triton import protocol as p
from rps_serve.triton.run_log import MODEL_PLACEHOLDER
from rps_serve.triton.settings import read_settings
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

logger = logging.getLogger(__name__)
# Short answers keep the demo to a few minutes on two cores. Texts keep up to 4,500 of the trace's
# tokens, a whole document, within the 8,192-token context with its chat turn.
DEMO_MAX_OUTPUT_TOKENS = 32
DEMO_CONTENT = ContentLimits(max_text_tokens=4500, max_output_tokens=DEMO_MAX_OUTPUT_TOKENS)
CAPACITY_SEED_OFFSET = 104729  # calibration content shares nothing with the replays' (no cache hits)
CAPACITY_POLICY = "fcfs"  # the capacity is FCFS's: the rate at which its backlog stays bounded
# A capacity probe that held more than this share of the server's admission limit (model.json's
# `max_pending_requests`) in the system counts as unbounded: at 0.9x of a capacity whose 45-s probe
# came near the limit, every policy of a fresh clone's demo met it in its runs' bursts (3-5 of 600
# requests refused) and no ratio could be measured.
PROBE_QUEUE_SHARE = 0.5


@dataclass(frozen=True)
class DemoConfig:
    """`rates` (requests per second) replace the open-loop capacity times `load_fractions`.
    `front_end` ("class" or "vllm") puts every policy on that front end (an ablation); None leaves each
    its own. `engine_args` (JSON) override model.json's for every server (e.g. a KV cache too small
    for the backlog: `{"num_gpu_blocks_override": 600}`). `pin` places the engine's worker on a core
    of its own (where there are two or more).
    `reuse_servers` keeps a server for the next run where the same policy runs next (`run_order`);
    otherwise every run starts a fresh one; `one_server` serves every run from one server with an
    engine per policy. `warm_up` is the share of a run's first arrivals its steady window leaves out
    (where the queue a policy orders is still forming)."""

    repository: Path
    model: Path
    out: Path
    policies: Sequence[str] = ("fcfs", "vllm-priority", "rps")
    mix: str = "mixed-iii"
    rates: Sequence[float] = ()
    load_fractions: Sequence[float] = (0.8,)
    repeats: int = 3
    calibrate_s: float = 30.0
    probes: int = 3
    probe_s: float = 45.0
    requests: int = 150
    seed: int = 0
    front_end: str | None = None
    engine_args: str = ""
    pin: bool = True
    reuse_servers: bool = False
    one_server: bool = False
    warm_up: float = STEADY_STATE_TRIM


def config_json(config: DemoConfig) -> dict[str, Any]:
    """The configuration as JSON (`plan.json`, `demo.json`)."""
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    settings.update(policies=list(config.policies), rates=list(config.rates))
    settings["load_fractions"] = list(config.load_fractions)
    return settings


def run_plan(config: DemoConfig) -> list[str]:
    """What the runs will be, fixed before the first: seeds, requests, policies, their order and the
    rule that no run is added, repeated or dropped after its outcome is seen."""
    order = planned_order(config)
    shown = "; ".join(f"{policy} {'+'.join(str(s) for s in seeds)}" for policy, seeds in order)
    servers = f"servers in order (policy seeds): {shown}"
    if config.one_server:
        engines = ", ".join(engine_model(policy) for policy in engine_policies(config))
        servers = (
            f"one server for every run, the capacity search's included, an engine per policy ({engines}); "
            f"runs in order (policy seeds): {shown}"
        )
    elif config.reuse_servers and not config.rates and order[0][0] == CAPACITY_POLICY:
        servers += f" (the first {CAPACITY_POLICY} runs on the capacity search's server)"
    loads = ", ".join(f"{r:g} req/s" for r in config.rates) or ", ".join(
        f"{f:g}x capacity" for f in config.load_fractions
    )
    last = config.seed + config.repeats - 1
    return [
        f"plan, fixed before the first run: {config.repeats} seeds ({config.seed}..{last}) x "
        f"{len(config.policies)} policies ({', '.join(config.policies)}) at {loads}, "
        f"{config.requests} requests a run, each measured from {config.warm_up:.0%} of its arrivals to "
        f"{1 - STEADY_STATE_TRIM:.0%}",
        servers,
        "every run is kept and reported: none is added, repeated or dropped after its outcome is seen",
    ]


def run_demo(config: DemoConfig, progress: Callable[[str], None] = logger.info) -> DemoRuns:
    """Write the plan, place the processes, find the capacity unless rates are given, then at each
    load every seed's trace under every policy in `run_order`; `progress` hears of each step."""
    if config.repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {config.repeats}")
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "runs").mkdir(exist_ok=True)
    plan = run_plan(config)
    (config.out / "plan.json").write_text(
        json.dumps({"plan": plan, "config": config_json(config)}, indent=1) + "\n"
    )
    for line in plan:
        progress(line)
    workdir = config.out.resolve() / "server"
    workdir.mkdir(exist_ok=True)
    configure_cpu_engine_environment(workdir / "vllm")
    placement = Placement.split() if config.pin else None
    if placement is not None:
        placement.pin_this_process()
        progress(placement.describe())
    loads = [LoadRuns(rate, None, warm_up=config.warm_up) for rate in config.rates]
    closed = opened = None
    with _Servers(config, placement) as servers:
        if not loads:
            closed, opened = _find_capacity(
                config, servers.start(CAPACITY_POLICY, "capacity", runs=False), progress
            )
            above = not any(p.bounded for p in opened.probes)
            loads = [
                LoadRuns(f * opened.rate, f, bracketed=opened.bracketed, above=above, warm_up=config.warm_up)
                for f in config.load_fractions
            ]
        total, counter = len(loads) * config.repeats * len(config.policies), itertools.count(1)
        progress(arrivals_ahead(config, [load.rate for load in loads]))

        def run_started(line: str) -> None:
            progress(f"[{next(counter)}/{total}] {line}")

        order = planned_order(config)
        for load in loads:
            runs: dict[str, dict[int, PolicyRun]] = {}
            for policy, seeds in order:
                name = f"{policy}-{load.rate:.2f}-" + "-".join(str(s + 1) for s in seeds)
                endpoints = servers.start(policy, name)
                done = _runs_on_one_server(
                    config, endpoints, servers.run_log, policy, load.rate, seeds, run_started
                )
                runs.setdefault(policy, {}).update(zip(seeds, done, strict=True))
            load.runs = {p: [by_seed[s] for s in range(config.repeats)] for p, by_seed in runs.items()}
    return DemoRuns(loads, placement, closed, opened)


def arrivals_ahead(config: DemoConfig, rates: Sequence[float]) -> str:
    """How long the runs' arrivals alone will take at `rates`, said before the first run: each run
    lasts its requests at its rate (given, or a fraction of the capacity this machine measured), so
    a slower machine runs longer, not fewer."""
    per_policy = sum(config.requests / rate for rate in rates) * config.repeats
    minutes = per_policy * len(config.policies) / 60
    runs = len(rates) * config.repeats * len(config.policies)
    return (
        f"{runs} runs of {config.requests} requests at {', '.join(f'{r:.2f}/s' for r in rates)}: "
        f"{minutes:.0f} min of arrivals, each run's drain after it"
    )


def planned_order(config: DemoConfig) -> list[tuple[str, list[int]]]:
    """`run_order` of the configuration's policies and seeds, a policy's consecutive runs on one
    server where servers are reused or one server holds every policy."""
    return run_order(config.policies, range(config.repeats), config.reuse_servers or config.one_server)


def run_order(
    policies: Sequence[str], seeds: Sequence[int], reuse_servers: bool
) -> list[tuple[str, list[int]]]:
    """The servers in the order they run, each with the seeds it replays. Seed by seed, each seed's
    policies back to back, in the reverse order of the seed before (fcfs rps, rps fcfs, fcfs rps...):
    a drift of the machine during a seed favours no policy over the seeds. With `reuse_servers`, a
    server runs on into the next seed where its policy ends one seed and starts the next."""
    order: list[tuple[str, list[int]]] = []
    for index, seed in enumerate(seeds):
        for policy in policies if index % 2 == 0 else reversed(policies):
            if reuse_servers and order and order[-1][0] == policy:
                order[-1][1].append(seed)
            else:
                order.append((policy, [seed]))
    return order


def _runs_on_one_server(
    config: DemoConfig,
    endpoints: Endpoints,
    run_log: Path,
    policy: str,
    rate: float,
    repeats: list[int],
    run_started: Callable[[str], None],
) -> list[PolicyRun]:
    """`repeats`' traces under `policy`, one after another (each drained before the next: `run_bench`
    waits for every answer) on the server at `endpoints`, which writes `run_log`."""
    runs = []
    for repeat in repeats:
        run_started(f"{policy}, seed {config.seed + repeat}: {config.requests} requests at {rate:.2f}/s")
        before = process_usage(endpoints.pid)
        bench = run_bench(_bench_config(config, endpoints, policy, rate, config.seed + repeat))
        processes = usage_during(before, process_usage(endpoints.pid))
        fit = ServedFit.of(scrape(endpoints.metrics_url), served_models(config, policy)[1])
        (window,) = steady([bench.records], config.warm_up)
        origin = bench.clock_origin_s
        start, end = origin + window.arrival_s.min(), origin + window.arrival_s.max()
        run = PolicyRun(bench, summarize(run_log, start, end, window, origin), processes, fit)
        keep_run(config, run, policy, rate, config.seed + repeat)
        runs.append(run)
    return runs


def keep_run(config: DemoConfig, run: PolicyRun, policy: str, rate: float, seed: int) -> Path:
    """Write a run's summary and every request's record as soon as it ends
    (`runs/POLICY-RATE-seedN.json`, as demo.json holds them), so that a server dying later in the demo
    takes no finished run with it."""
    path = config.out / "runs" / f"{policy}-{rate:.2f}-seed{seed}.json"
    kept = {"policy": policy, "rate": rate, "seed": seed, **run.summary(config.warm_up)}
    path.write_text(json.dumps(kept) + "\n")
    return path


def read_kept_runs(folder: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """Every run `keep_run` wrote into `folder` (a demo's `runs/`), by policy and seed."""
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*-seed*.json")):
        run = json.loads(path.read_text())
        runs.setdefault(run["policy"], {})[int(run["seed"])] = run
    return runs


def engine_policies(config: DemoConfig) -> list[str]:
    """The policies the one server holds an engine for: the runs', and the capacity search's where it
    searches and the runs do not include it."""
    policies = list(config.policies)
    if not config.rates and CAPACITY_POLICY not in policies:
        policies.append(CAPACITY_POLICY)
    return policies


def served_models(config: DemoConfig, policy: str) -> tuple[str, str]:
    """The ensemble `policy`'s requests go to, and the engine model behind it."""
    if config.one_server:
        return ensemble_model(policy), engine_model(policy)
    return p.ENSEMBLE, p.VLLM_MODEL


class _Servers:
    """The demo's servers, one at a time, each named after its runs (its log `tritonserver-NAME.log`,
    its run log `runs/NAME.jsonl`); or, with `one_server`, one server for every run (its log
    `tritonserver.log`, each engine's run log `runs/ENGINE.jsonl`).

    A server stops in the background while the next one starts: its shutdown is mostly vLLM's
    processes winding down (some 8 s on two cores), and the start it overlaps measures nothing. With
    `reuse_servers`, the first runs take over the capacity search's server where they run its policy
    (a server started for them would be the same server, one start later); they read its run log
    over their own windows."""

    def __init__(self, config: DemoConfig, placement: Placement | None) -> None:
        self._config, self._placement = config, placement
        self._server: AbstractContextManager[Endpoints] | None = None
        self._endpoints: Endpoints | None = None
        self._policy = ""
        self._takeover = False  # the server is a capacity search's, which the first runs may take over
        self.run_log = Path()
        self._stopping: list[threading.Thread] = []
        self._errors: list[BaseException] = []

    def start(self, policy: str, name: str, runs: bool = True) -> Endpoints:
        """A server for `policy`'s runs (`runs` False: for a capacity search, whose server the first
        runs of its policy may take over)."""
        if self._config.one_server:
            return self._one_server(policy)
        if self._endpoints is not None and self._takeover and self._policy == policy and runs:
            self._takeover = False
            return self._endpoints
        self._stop_in_background()
        self.run_log = self._config.out.resolve() / "runs" / f"{name}.jsonl"
        self.run_log.unlink(missing_ok=True)
        server = _server(self._config, self._placement, policy, name, self.run_log)
        self._endpoints = self._enter(server)
        self._server, self._policy = server, policy
        self._takeover = not runs and self._config.reuse_servers
        return self._endpoints

    def _one_server(self, policy: str) -> Endpoints:
        """The server with an engine per policy, started at the first call; `run_log` then names the
        log of `policy`'s engine."""
        out = self._config.out.resolve()
        runs = out / "runs"
        if self._endpoints is None:
            policies = engine_policies(self._config)
            for engine in map(engine_model, policies):
                (runs / f"{engine}.jsonl").unlink(missing_ok=True)
            work = out / "server"
            run_logs = runs / f"{MODEL_PLACEHOLDER}.jsonl"
            engines = engine_settings(self._config, self._placement, None, run_logs)
            log = out / "tritonserver.log"
            logger.info("starting one tritonserver with an engine per policy (log %s)", log)
            repository = policy_repository(work, policies, self._config.repository)
            self._server = launch_server(repository, work, engines, log, models=policy_models(policies))
            self._endpoints = self._enter(self._server)
        self.run_log = runs / f"{engine_model(policy)}.jsonl"
        return self._endpoints

    def _enter(self, server: AbstractContextManager[Endpoints]) -> Endpoints:
        """Start `server`, loading its models on every core, and place it once it is ready (runs
        start only after: they see the placement they always had)."""
        if self._placement is None:
            return server.__enter__()
        with self._placement.loading():
            endpoints = server.__enter__()
        if endpoints.pid is not None:
            self._placement.pin_tree(endpoints.pid)
        return endpoints

    def _stop_in_background(self) -> None:
        if self._server is None:
            return
        stopping = threading.Thread(target=self._stop, args=(self._server,), name="server-stop")
        stopping.start()
        self._stopping.append(stopping)
        self._server = self._endpoints = None

    def _stop(self, server: AbstractContextManager[Endpoints]) -> None:
        try:
            server.__exit__(None, None, None)
        except BaseException as error:  # reported when the demo ends (`__exit__`)
            self._errors.append(error)

    def __enter__(self) -> _Servers:
        return self

    def __exit__(self, *failure: object) -> None:
        """Every server stopped before the demo goes on (or its error goes up)."""
        if self._server is not None:
            self._stop(self._server)
            self._server = self._endpoints = None
        for stopping in self._stopping:
            stopping.join()
        if self._errors and failure[0] is None:
            raise self._errors[0]


def engine_settings(
    config: DemoConfig, placement: Placement | None, policy: str | None, run_log: Path | None = None
) -> EngineSettings:
    """The settings a run's server starts its engines with; `policy` (a policy or a variant the
    plug-in's settings express: `served_settings`) None leaves each engine its model.json's."""
    served, scheduler = served_settings(policy) if policy is not None else (None, {})
    return EngineSettings(
        model=config.model,
        policy=None if served is None else served.value,
        scheduler=scheduler,
        front_end=config.front_end,
        engine_args=config.engine_args,
        run_log=run_log,
        env={} if placement is None else placement.environment(),
    )


def _server(
    config: DemoConfig, placement: Placement | None, policy: str, run_name: str, run_log: Path | None = None
) -> AbstractContextManager[Endpoints]:
    engines = engine_settings(config, placement, policy, run_log)
    log = config.out.resolve() / f"tritonserver-{run_name}.log"
    logger.info("%s: starting tritonserver (log %s)", run_name, log)
    return launch_server(config.repository, config.out.resolve() / "server", engines, log)


def _bench_config(
    config: DemoConfig, endpoints: Endpoints, policy: str, rate: float, seed: int
) -> BenchConfig:
    ensemble, engine = served_models(config, policy)
    return BenchConfig(
        url=endpoints.grpc_url,
        model=config.model,
        workload=SyntheticWorkload(config.mix, rate, config.requests, seed, stratified=True),
        seed=seed,
        label=policy,
        max_text_tokens=DEMO_CONTENT.max_text_tokens,
        max_output_tokens=DEMO_MAX_OUTPUT_TOKENS,
        isolated=1,
        progress=False,
        metrics_url=endpoints.metrics_url,
        ensemble=ensemble,
        engine=engine,
    )


def _find_capacity(
    config: DemoConfig, endpoints: Endpoints, progress: Callable[[str], None]
) -> tuple[Capacity, OpenLoopCapacity]:
    """On the FCFS server at `endpoints`: the closed-loop rate, then the open-loop capacity bracketed
    from it."""
    seed = config.seed + CAPACITY_SEED_OFFSET
    served = RequestFormat.of_model(config.model)
    ensemble = served_models(config, CAPACITY_POLICY)[0]
    probes = iter(range(1, config.probes + 1))

    def probe(rate: float) -> Replayed:
        n = next(probes)
        requests = max(20, round(rate * config.probe_s))
        progress(f"capacity probe {n}/{config.probes}: {requests} requests at {rate:.2f}/s (open loop)")
        workload = SyntheticWorkload(config.mix, rate, requests, seed + n, stratified=True)
        trace = workload.trace()
        generations = build_requests(trace, served, DEMO_CONTENT, seed + n)
        return replay(endpoints.grpc_url, trace, generations, model=ensemble)

    stream = request_stream(config.mix, served, seed, content_seed=seed, limits=DEMO_CONTENT)
    progress(f"capacity: {config.calibrate_s:g} s closed loop, then {config.probes} open-loop probes")
    closed = measure_capacity(endpoints.grpc_url, stream, config.calibrate_s, model=ensemble)
    if closed.rate <= 0:
        raise RuntimeError(f"the server completed no request in {config.calibrate_s:g} s")
    model_json = config.repository / p.VLLM_MODEL / "model.json"
    limit = read_settings(model_json, config.repository).max_pending_requests
    queue = None if limit is None else int(limit * PROBE_QUEUE_SHARE)
    opened = search_open_loop_capacity(probe, ceiling=closed.rate, probes=config.probes, max_in_system=queue)
    return closed, opened
