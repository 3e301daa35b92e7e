"""`rps-serve serve`: the model repository on a local tritonserver (127.0.0.1), until Ctrl-C."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from rps_harness.cli.local_stack import add_local_server_arguments
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

    from rps_harness.local.repository import ready_to_serve
    from rps_harness.local.server import EngineSettings, Ports, launch_server

    ready_to_serve(args.repository, args.model, report=print)
    engines = EngineSettings(model=args.model, policy=args.policy)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"starting tritonserver on {args.repository} (log: {args.workdir / 'tritonserver.log'})")
    ports = Ports(http=args.http_port, grpc=args.grpc_port, metrics=args.metrics_port)
    with launch_server(
        args.repository, args.workdir.resolve(), engines, ports=ports, load_timeout_s=args.load_timeout_s
    ) as endpoints:
        print(
            f"ready: gRPC {endpoints.grpc_url}, HTTP {endpoints.http_url}, metrics {endpoints.metrics_url}"
            " (Ctrl-C stops)",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0
