"""`rps-serve claims`: the page of every recorded claim, from the `claims.json` records the demo and
the comparison write (`loadtest.claims`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("claims", help="write the page of recorded claims from claims.json records")
    parser.add_argument("records", nargs="*", type=Path, metavar="CLAIMS_JSON")
    parser.add_argument("--out", type=Path, metavar="FILE", help="the page (default: print it)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rps_serve.loadtest.claims import claims_page

    page = claims_page([json.loads(path.read_text()) for path in args.records])
    if args.out is None:
        print(page, end="")
    else:
        args.out.write_text(page)
        print(f"wrote {args.out} from {len(args.records)} records")
    return 0
