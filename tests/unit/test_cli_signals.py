"""A command stopped with SIGTERM unwinds, so the servers it started are stopped on the way out: the
handler `rps-serve`'s `main()` installs, exercised through `main()` itself (a real `trace` command
whose writing blocks until the signal)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

SCRIPT = """
import sys, time
from rps_harness import cli
from rps_harness.cli import trace

def write_trace(*args, **kwargs):
    try:
        print("started", flush=True)
        time.sleep(60)
    finally:
        print("cleaned up", flush=True)

trace.write_trace = write_trace
sys.exit(cli.main(["trace", "--rate", "1", "--requests", "4", "--out", "unused.jsonl"]))
"""


@pytest.mark.slow
def test_sigterm_runs_the_clean_up() -> None:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "started"
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    assert out.strip() == "cleaned up"
    assert process.returncode == 128 + signal.SIGTERM
