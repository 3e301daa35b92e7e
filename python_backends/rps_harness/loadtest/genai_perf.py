"""NVIDIA GenAI-Perf against the ensemble over KServe gRPC streaming, and what its exports say.

GenAI-Perf writes vllm_backend's request (`text_input`, `stream`, `exclude_input_in_output` and
`sampling_parameters` with string values, `{"max_tokens": "8"}`) and hands it to the `perf_analyzer`
first on PATH: the tritonclient 2.51 binary (`loadtest.perf_analyzer`), as the perf-analyzer wheel
it depends on needs glibc 2.38. It lives in a venv of its own (`make setup-genai-perf`): its
dependencies are not the CPU stack's. A run counts as clean only where GenAI-Perf exits 0, neither it
nor perf_analyzer printed an error, and every request perf_analyzer exported got a response.

That 2.51 binary records a declared output that a response lacks (vllm_backend's `cumulative_logprob`
and `num_*_tokens`, sent only when asked) as a zero-byte buffer, then exports it by reading one value
from it (fixed upstream in perf_analyzer PR #153, after 2.51). When those bytes read as a NaN, its
JSON writer stops before its first flush: `profile_export.json` is empty and GenAI-Perf fails parsing
it (seen in 1 of about 25 runs on a loaded machine). That run is repeated, up to `EXPORT_TRIES` runs;
any other failure is not.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rps_harness.loadtest.perf_analyzer import run_logged

logger = logging.getLogger(__name__)

EXECUTABLE = Path("bin") / "genai-perf"
STATS_EXPORT = "profile_export_genai_perf.json"
REQUESTS_EXPORT = "profile_export.json"  # perf_analyzer's own, one record per request
EXPORT_TRIES = 3  # runs, where perf_analyzer 2.51 left its requests export empty
# perf_analyzer's "Thread [0] had error: ...", "Failed to ...", and GenAI-Perf's tracebacks and
# "ERROR" log lines.
_ERROR_LINE = re.compile(r"\berror\b|\bfailed\b|traceback", re.IGNORECASE)


def genai_perf_executable(venv: Path) -> Path:
    """GenAI-Perf's command in `venv`; says how to install it where it is missing."""
    executable = venv / EXECUTABLE
    if not executable.is_file():
        raise FileNotFoundError(
            f"GenAI-Perf is not installed in {venv}: run `make setup-genai-perf` "
            "(a venv of its own, from requirements/genai-perf.txt)"
        )
    return executable


@dataclass(frozen=True)
class GenAIPerfRun:
    """One `genai-perf profile` of a decoupled Triton model on synthetic text: `requests` requests,
    `concurrency` at a time, `input_tokens` of prompt and exactly `output_tokens` out."""

    url: str
    model: str
    tokenizer: Path
    artifact_dir: Path
    concurrency: int = 2
    requests: int = 24
    input_tokens: int = 32
    output_tokens: int = 8
    seed: int = 0

    def command(self, executable: Path) -> list[str]:
        return [
            str(executable),
            "profile",
            "-m",
            self.model,
            "--backend",
            "vllm",
            "--endpoint-type",
            "kserve",
            "--streaming",
            "-u",
            self.url,
            "--tokenizer",
            str(self.tokenizer),
            "--synthetic-input-tokens-mean",
            str(self.input_tokens),
            "--synthetic-input-tokens-stddev",
            "0",
            "--output-tokens-mean",
            str(self.output_tokens),
            "--output-tokens-stddev",
            "0",
            # min_tokens = max_tokens: every request generates its output_tokens.
            "--output-tokens-mean-deterministic",
            "--num-dataset-entries",
            str(self.requests),
            "--random-seed",
            str(self.seed),
            "--concurrency",
            str(self.concurrency),
            "--request-count",
            str(self.requests),
            "--artifact-dir",
            str(self.artifact_dir),
            # perf_analyzer's output reaches the log (GenAI-Perf drops it otherwise).
            "--verbose",
        ]


@dataclass(frozen=True)
class GenAIPerfResult:
    """What one run's exports and log say: GenAI-Perf's statistics (`stats`, its JSON export less
    the echoed configuration), the responses of each request perf_analyzer recorded (a streamed
    request gets one a token), every error line printed, and the runs it took (the server saw the
    requests of each)."""

    export_dir: Path
    stats: dict[str, Any]
    responses: list[int]
    errors: list[str]
    runs: int = 1

    @property
    def requests(self) -> int:
        """The requests GenAI-Perf's statistics count."""
        return int(self.stats["request_count"]["avg"])

    @property
    def recorded(self) -> int:
        """The requests perf_analyzer recorded."""
        return len(self.responses)

    @property
    def unanswered(self) -> int:
        """The recorded requests that got no response."""
        return self.responses.count(0)

    def summary(self) -> dict[str, Any]:
        """The numbers a report keeps: counts, throughput and latencies in ms."""
        latencies = {
            f"{metric}_ms": {q: self.stats[metric][q] for q in ("avg", "p50", "p90", "p99")}
            for metric in ("time_to_first_token", "inter_token_latency", "request_latency")
            if metric in self.stats
        }
        return {
            "requests": self.requests,
            "recorded": self.recorded,
            "unanswered": self.unanswered,
            "errors": len(self.errors),
            "runs": self.runs,
            "requests_per_s": self.stats["request_throughput"]["avg"],
            "output_tokens_per_s": self.stats["output_token_throughput"]["avg"],
            **latencies,
            "export_dir": str(self.export_dir),
        }


def read_exports(artifact_dir: Path, log: Path) -> GenAIPerfResult:
    """The run's result from the exports GenAI-Perf wrote under `artifact_dir` and its `log`."""
    found = sorted(artifact_dir.glob(f"*/{STATS_EXPORT}"))
    if len(found) != 1:
        raise RuntimeError(f"expected one {STATS_EXPORT} under {artifact_dir}, found {len(found)}")
    export_dir = found[0].parent
    stats = json.loads(found[0].read_text())
    stats.pop("input_config", None)
    experiments = json.loads((export_dir / REQUESTS_EXPORT).read_text())["experiments"]
    records = [request for experiment in experiments for request in experiment["requests"]]
    responses = [len(request.get("response_timestamps", [])) for request in records]
    errors = [line for line in log.read_text().splitlines() if _ERROR_LINE.search(line)]
    return GenAIPerfResult(export_dir, stats, responses, errors)


def _empty_exports(artifact_dir: Path) -> list[Path]:
    """The run directories under `artifact_dir` whose requests export perf_analyzer left empty."""
    return [found.parent for found in artifact_dir.glob(f"*/{REQUESTS_EXPORT}") if found.stat().st_size == 0]


def run_genai_perf(
    executable: Path, perf_analyzer: Path, run: GenAIPerfRun, log: Path, timeout_s: float = 600.0
) -> GenAIPerfResult:
    """Run GenAI-Perf with `perf_analyzer` first on PATH (its output and perf_analyzer's to `log`)
    and read its exports; runs it again where perf_analyzer left its requests export empty (the
    failed run's log kept beside `log`), and raises on any other non-zero exit."""
    run.artifact_dir.mkdir(parents=True, exist_ok=True)
    logger.info("running %s", " ".join(run.command(executable)))
    runs = 1
    while True:
        try:
            run_logged(run.command(executable), perf_analyzer, log, timeout_s)
            break
        except RuntimeError:
            emptied = _empty_exports(run.artifact_dir)
            if not emptied or runs == EXPORT_TRIES:
                raise
        kept = log.rename(log.with_name(f"{log.stem}.run{runs}{log.suffix}"))
        logger.warning("perf_analyzer left %s empty (see %s); running again", REQUESTS_EXPORT, kept)
        for directory in emptied:
            shutil.rmtree(directory)
        runs += 1
    return replace(read_exports(run.artifact_dir, log), runs=runs)
