"""Where a run's requests come from: a synthetic workload (a mix at a rate) or a trace file, never both.

`simulate`, `bench`, `ab` and `trace` take one of these; the command line builds it in one place
(`rps_harness.cli.arguments.workload`). `demo` builds a `SyntheticWorkload` per run at a rate it measures
first; `soak` draws its own open-loop cycles of the same mix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_harness.workload.mixes import mix_by_name
from rps_harness.workload.shapes import ISOLATION, shapes_by_name
from rps_harness.workload.trace import Trace, generate_trace, read_trace

DEFAULT_MIX = "mixed-iii"


@dataclass(frozen=True)
class SyntheticWorkload:
    """`requests` requests of `mix` arriving at `rate` per second (Poisson, or Gamma with `burst_cv`),
    with the token counts of `shapes`, drawn with `seed`; `stratified` gives every seed the mix's
    proportions and the rate exactly (`workload.trace.generate_trace`)."""

    mix: str = DEFAULT_MIX
    rate: float = 2.0
    requests: int = 1000
    seed: int = 0
    burst_cv: float | None = None
    shapes: str = ISOLATION
    stratified: bool = False

    def __post_init__(self) -> None:
        mix_by_name(self.mix)  # an unknown mix or shape set fails here, not at the first use
        shapes_by_name(self.shapes)
        if self.rate <= 0:
            raise ValueError(f"the arrival rate must be positive, got {self.rate:g}")
        if self.requests < 1:
            raise ValueError(f"need at least one request, got {self.requests}")

    def trace(self) -> Trace:
        return generate_trace(
            mix_by_name(self.mix),
            self.rate,
            self.requests,
            self.seed,
            self.burst_cv,
            self.shapes,
            self.stratified,
        )

    def describe(self) -> str:
        return f"{self.mix} ({self.shapes} shapes) at {self.rate:g} req/s"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TraceFile:
    """The requests of a trace file (`rps-serve trace`), at its arrival times."""

    path: Path

    def trace(self) -> Trace:
        return read_trace(self.path)

    def describe(self) -> str:
        return f"trace {self.path.name}"

    def to_json(self) -> dict[str, Any]:
        return {"trace": str(self.path)}


Workload = SyntheticWorkload | TraceFile
