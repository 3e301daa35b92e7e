"""A command stopped with SIGTERM unwinds, so the servers it started are stopped on the way out."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

SCRIPT = """
import signal, time
from rps_harness import cli
signal.signal(signal.SIGTERM, cli._exit_on_sigterm)
try:
    print("started", flush=True)
    time.sleep(60)
finally:
    print("cleaned up", flush=True)
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
