"""NVIDIA perf_analyzer against the ensemble: fetching a binary that runs here, and running it.

The `tritonclient==2.51.0` wheel carries a working `bin/perf_analyzer` (PyPI's perf-analyzer needs a
newer glibc; newer tritonclient wheels hold a placeholder). Installing that wheel would pin
protobuf < 5, which vLLM cannot use, so only the binary is taken out of it. It links `libb64.so.0d`
and `libcudart.so.12`, which nvidia-pytriton ships under hashed names: they are linked in by their
plain names next to the binary.
"""

from __future__ import annotations

import csv
import logging
import os
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

WHEEL = "tritonclient==2.51.0"
_BINARY_IN_WHEEL = "tritonclient-2.51.0.data/data/bin/perf_analyzer"
_LIBRARIES = {"libb64.so.0d": "libb64-", "libcudart.so.12": "libcudart-"}


def _pytriton_libs() -> Path:
    libs = Path(sysconfig.get_paths()["purelib"]) / "nvidia_pytriton.libs"
    if not libs.is_dir():
        raise FileNotFoundError("nvidia-pytriton is not installed: run `make setup`")
    return libs


def ensure_perf_analyzer(directory: Path) -> Path:
    """`directory/perf_analyzer` (downloaded and unpacked on first use) with its libraries beside it."""
    binary = directory / "perf_analyzer"
    directory.mkdir(parents=True, exist_ok=True)
    if not binary.is_file():
        wheels = sorted(directory.glob("tritonclient-2.51.0-*.whl"))
        if not wheels:
            logger.info("downloading %s (only its perf_analyzer binary is used)", WHEEL)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    WHEEL,
                    "-d",
                    str(directory),
                ],
                check=True,
            )
            wheels = sorted(directory.glob("tritonclient-2.51.0-*.whl"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            binary.write_bytes(wheel.read(_BINARY_IN_WHEEL))
        binary.chmod(0o755)
    libs = _pytriton_libs()
    for name, prefix in _LIBRARIES.items():
        link = directory / name
        if not link.exists():
            matches = sorted(libs.glob(f"{prefix}*"))
            if not matches:
                raise FileNotFoundError(f"no {prefix}* in {libs}: perf_analyzer needs {name}")
            link.symlink_to(matches[0])
    return binary


def run_logged(command: list[str], binary: Path, log: Path, timeout_s: float) -> None:
    """Run `command` (perf_analyzer `binary`, or a tool that runs `perf_analyzer` by name) with
    `binary`'s directory first on PATH and on LD_LIBRARY_PATH (its libraries lie beside it), its
    output to `log`; raises with the log's tail where it exits non-zero."""
    env = dict(os.environ)
    for name in ("PATH", "LD_LIBRARY_PATH"):
        env[name] = os.pathsep.join(p for p in (str(binary.parent), env.get(name, "")) if p)
    with log.open("w") as out:
        done = subprocess.run(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
        )
    if done.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{Path(command[0]).name} exited with {done.returncode}; see {log}:\n{tail}")


@dataclass(frozen=True)
class PerfRun:
    """One perf_analyzer measurement: a concurrency sweep over one input-data file."""

    url: str
    model: str
    input_data: Path
    csv_out: Path
    concurrency: str = "1:2"
    measurement_ms: int = 10000
    stability_percentage: int = 50  # 2 shared cores: latencies do not settle within the default 10%
    max_trials: int = 6

    def command(self, binary: Path) -> list[str]:
        return [
            str(binary),
            "-m",
            self.model,
            "-u",
            self.url,
            "-i",
            "grpc",
            "--streaming",
            "--async",
            f"--input-data={self.input_data}",
            f"--concurrency-range={self.concurrency}",
            f"--measurement-interval={self.measurement_ms}",
            f"--stability-percentage={self.stability_percentage}",
            f"--max-trials={self.max_trials}",
            "-f",
            str(self.csv_out),
        ]


def run_perf_analyzer(
    binary: Path, run: PerfRun, log: Path, timeout_s: float = 900.0
) -> list[dict[str, str]]:
    """Run perf_analyzer (output to `log`) and return its CSV rows, one per concurrency level."""
    run.csv_out.parent.mkdir(parents=True, exist_ok=True)
    run_logged(run.command(binary), binary, log, timeout_s)
    with run.csv_out.open() as rows:
        return list(csv.DictReader(rows))
