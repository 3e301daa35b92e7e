"""`rps-serve claims`: the page of every claim's latest run and the log of every recorded run, from
the `claims.json` records the demo and the comparison write (`loadtest.claims`)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "claims", help="write the claims page and the run log from claims.json records"
    )
    parser.add_argument("records", nargs="*", type=Path, metavar="CLAIMS_JSON")
    parser.add_argument("--out", type=Path, metavar="FILE", help="the claims page (default: print it)")
    parser.add_argument(
        "--log", type=Path, metavar="FILE", help="the run log (default: log.md beside the claims page)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_harness.loadtest.claims import claims_page, log_page

    folder = args.out.parent if args.out is not None else Path()
    log = args.log if args.log is not None else folder / "log.md"
    read = {path: json.loads(path.read_text()) for path in args.records}

    def linked(folder: Path) -> dict[str, Any]:
        """The records by their links from a page in `folder`, as its readers follow them."""
        return {_link(path, folder): record for path, record in read.items()}

    page = claims_page(linked(folder), log=_link(log, folder))
    if args.out is None:
        print(page, end="")
        return 0
    args.out.write_text(page)
    log.write_text(log_page(linked(log.parent), claims=_link(args.out, log.parent)))
    print(f"wrote {args.out} and {log} from {len(args.records)} records")
    return 0


def _link(path: Path, folder: Path) -> str:
    return Path(os.path.relpath(path, folder)).as_posix()
