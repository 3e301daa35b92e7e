"""Every relative link in README.md, benchmarks/README.md and docs/ reaches a file or folder that
exists and, where it names an anchor in a Markdown page, a heading of that page: a link into a page
that was reworded points nowhere without this.

Anchors follow GitHub's rule for headings: lower case, punctuation other than hyphens dropped,
spaces as hyphens, "-1", "-2"... for repeats.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from tests.checkout import CHECKOUT

# [text](target#anchor), [text](#anchor): the target and anchor of a relative link.
LINK = re.compile(r"\]\((?!https?:|mailto:)([^)#\s]*)(#[^)\s]*)?\)")
HEADING = re.compile(r"^#{1,6} (.*)$")


def _slug(heading: str) -> str:
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


@cache
def _anchors(page: Path) -> frozenset[str]:
    """The anchors of `page`'s headings (read once per page, however many links point into it)."""
    counts: dict[str, int] = {}
    anchors: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else HEADING.match(line)
        if match:
            slug = _slug(match.group(1))
            repeat = counts.get(slug, 0)
            counts[slug] = repeat + 1
            anchors.add(slug if repeat == 0 else f"{slug}-{repeat}")
    return frozenset(anchors)


def _pages() -> list[Path]:
    return [
        CHECKOUT / "README.md",
        CHECKOUT / "benchmarks" / "README.md",
        *sorted((CHECKOUT / "docs").rglob("*.md")),
    ]


def _broken_links(page: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(page.read_text(encoding="utf-8")):
        target, anchor = match.group(1), match.group(2)
        if not target and not anchor:
            continue
        linked = (page.parent / target).resolve() if target else page
        where = f"{page.relative_to(CHECKOUT)}: {target or ''}{anchor or ''}"
        if not linked.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor[1:] not in _anchors(linked):
            broken.append(f"{where} (no such heading)")
    return broken


def test_slug_follows_githubs_rule() -> None:
    assert _slug("The run is the unit of evidence") == "the-run-is-the-unit-of-evidence"
    assert _slug("Scale-out: replicas (issue 15, item 8)") == "scale-out-replicas-issue-15-item-8"
    assert _slug("`make perf` on 30 November") == "make-perf-on-30-november"


def test_every_relative_link_reaches_its_page_and_heading() -> None:
    broken = [link for page in _pages() for link in _broken_links(page)]
    assert not broken, "links that point nowhere:\n" + "\n".join(broken)
