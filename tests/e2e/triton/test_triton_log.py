"""Triton's log flags govern the models' logs: `preprocess`'s records reach the server's log through
`pb_utils.Logger`, in Triton's own line format, and its debug records only under `--log-verbose=1`.
The server runs `preprocess` alone; `vllm_model` is an idle stand-in, there for its model.json."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rps_harness.local.server import local_server
from rps_serve.triton.settings import MODEL_ENV
from tests.checkout import REPOSITORY
from tests.e2e.builds import tiny_model
from tests.e2e.triton.conftest import SPEC

IDLE_MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        return None
"""
# Triton's: level letter, MMDD, time, thread id, source file:line, then the message.
TRITON_LINE = re.compile(r"^[IWEV]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+:\d+\] ")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory, SPEC)


def served_log(model: Path, work: Path, log_verbose: int) -> list[str]:
    """The log of a server started on `preprocess` with `--log-verbose=log_verbose`, then stopped."""
    repository = work / "model_repository"
    for name in ("preprocess", "vllm_model"):
        shutil.copytree(REPOSITORY / name, repository / name, ignore=shutil.ignore_patterns("__pycache__"))
    (repository / "vllm_model" / "1" / "model.py").write_text(IDLE_MODEL)
    log = work / "tritonserver.log"
    with local_server(repository, work, env={MODEL_ENV: str(model)}, log_file=log, log_verbose=log_verbose):
        pass
    return log.read_text(errors="replace").splitlines()


@pytest.mark.parametrize("log_verbose", [0, 1])
def test_model_logs_in_triton_log_governed_by_its_flags(
    model: Path, tmp_path: Path, log_verbose: int
) -> None:
    lines = served_log(model, tmp_path, log_verbose)
    info = [line for line in lines if "rps_serve.triton.preprocess_model: preprocess: model" in line]
    assert info, "preprocess's info line is not in the server's log"
    assert all(TRITON_LINE.match(line) for line in info), info
    verbose = [
        line for line in lines if "rps_serve.triton.preprocess_model: preprocess: placeholders" in line
    ]
    assert all(TRITON_LINE.match(line) for line in verbose), verbose
    assert bool(verbose) == bool(log_verbose), verbose
