"""Profile records: what one request cost the engine (an isolated run, or observed under load),
stored as JSON lines."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from rps_serve.requests import Modality, RequestFeatures


@dataclass(frozen=True)
class ProfileRecord:
    """What the Workload Profiler measures for one request run alone on the engine, or, with
    `under_load`, what the request's prefill took while the engine served (`cost.observed`: its
    share of the steps it ran in, vision encoding included in `prefill_s`).

    Times are GPU seconds and exclude CPU preprocessing; `prompt_tokens` includes the
    image/video placeholder tokens counted in `modality_tokens`.
    """

    modality: Modality
    prompt_tokens: int
    modality_tokens: int
    encoder_s: float
    prefill_s: float
    output_tokens: int
    under_load: bool = False

    @property
    def admission_s(self) -> float:
        """GPU seconds the request costs at admission: vision encoding plus LLM prefill."""
        return self.encoder_s + self.prefill_s

    @property
    def features(self) -> RequestFeatures:
        return RequestFeatures(self.modality, self.prompt_tokens, self.modality_tokens)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "modality": self.modality.value})

    @classmethod
    def from_json(cls, line: str) -> ProfileRecord:
        data = json.loads(line)
        return cls(
            modality=Modality(data["modality"]),
            prompt_tokens=int(data["prompt_tokens"]),
            modality_tokens=int(data["modality_tokens"]),
            encoder_s=float(data["encoder_s"]),
            prefill_s=float(data["prefill_s"]),
            output_tokens=int(data["output_tokens"]),
            under_load=bool(data.get("under_load", False)),
        )


def write_records(path: Path, records: Iterable[ProfileRecord]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(record.to_json() + "\n")


def read_records(path: Path) -> Iterator[ProfileRecord]:
    """Yield the records of a JSONL file, naming the line of any record that does not parse."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                yield ProfileRecord.from_json(line)
            except (KeyError, ValueError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a profile record ({error})") from error
