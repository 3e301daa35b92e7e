"""Workload mixes: the share of each request kind (short text, long text, image, video, and the kinds
whose cost disagrees with their modality: document, thumbnail, clip) in a run."""

from __future__ import annotations

from dataclasses import dataclass

from rps_harness.workload.shapes import RequestKind


@dataclass(frozen=True)
class Mix:
    """Fractions of each request kind (in `RequestKind` order)."""

    name: str
    short_text: float
    long_text: float
    image: float
    video: float
    document: float = 0.0
    thumbnail: float = 0.0
    clip: float = 0.0

    def __post_init__(self) -> None:
        shares = self.fractions
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise ValueError(f"mix {self.name!r}: fractions must be non-negative and sum to 1, got {shares}")

    @property
    def fractions(self) -> tuple[float, ...]:
        """The shares in `RequestKind` order."""
        return (
            self.short_text,
            self.long_text,
            self.image,
            self.video,
            self.document,
            self.thumbnail,
            self.clip,
        )

    def share(self, kind: RequestKind) -> float:
        return self.fractions[list(RequestKind).index(kind)]


# The paper's mixes (RPS-Serve, arXiv 2603.26498): (text, long text, image, video). The single-kind mixes
# serve isolated runs. `cost-vs-modality` adds documents (text costing what a video costs), thumbnails
# (images cheaper than most texts) and short clips to a mix like mixed-iii: where stock priority by
# modality and RPS's cost classes disagree.
MIXES: dict[str, Mix] = {
    mix.name: mix
    for mix in (
        Mix("mixed-i", 0.60, 0.25, 0.10, 0.05),
        Mix("mixed-ii", 0.50, 0.25, 0.15, 0.10),
        Mix("mixed-iii", 0.40, 0.30, 0.20, 0.10),
        Mix("mixed-iv", 0.35, 0.25, 0.25, 0.15),
        Mix("mixed-v", 0.30, 0.20, 0.30, 0.20),
        Mix("cost-vs-modality", 0.35, 0.20, 0.12, 0.05, document=0.08, thumbnail=0.15, clip=0.05),
        Mix("text", 1.0, 0.0, 0.0, 0.0),
        Mix("long-text", 0.0, 1.0, 0.0, 0.0),
        Mix("image", 0.0, 0.0, 1.0, 0.0),
        Mix("video", 0.0, 0.0, 0.0, 1.0),
    )
}


def mix_by_name(name: str) -> Mix:
    if name not in MIXES:
        raise ValueError(f"unknown mix {name!r}; expected one of {', '.join(MIXES)}")
    return MIXES[name]
