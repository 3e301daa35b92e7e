"""`rps-serve serve`: the model repository on a local tritonserver (127.0.0.1), until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from rps_serve.cli.local_stack import add_local_server_arguments
from rps_serve.scheduling.parameters import Policy


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("serve", help="run the model repository on a local tritonserver (127.0.0.1)")
    add_local_server_arguments(parser, default_model="model.json's, the tiny model, built if missing")
    parser.add_argument("--policy", choices=[p.value for p in Policy], help="override model.json's policy")
    parser.add_argument(
        "--workdir", type=Path, metavar="DIR", default=Path("build/serve"), help="server tree, sockets, log"
    )
    for name, default in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        parser.add_argument(
            f"--{name}-port", type=int, default=default, help=f"{name} port on 127.0.0.1 (0: a free one)"
        )
    parser.add_argument(
        "--load-timeout-s",
        type=float,
        default=900.0,
        help="fail (naming the model, with the log's tail) if a model is not loaded by then",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import signal
    import threading

    from rps_serve.local.checkout import TINY_MODEL
    from rps_serve.local.repository import ensure_cost_models, ensure_tiny_model
    from rps_serve.local.server import Ports, local_server
    from rps_serve.triton.settings import MODEL_ENV, POLICY_ENV, SETTINGS_FILE, read_settings
    from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment

    env = {POLICY_ENV: args.policy} if args.policy else {}
    if args.model:
        env[MODEL_ENV] = str(args.model.resolve())
    elif ensure_tiny_model(TINY_MODEL):
        print(f"built the tiny model into {TINY_MODEL}")
    model = args.model or read_settings(args.repository / SETTINGS_FILE, args.repository).model
    if source := ensure_cost_models(args.repository, model):
        print(f"trained the cost models into {args.repository} on {source}")
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
