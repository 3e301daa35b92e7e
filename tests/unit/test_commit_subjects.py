"""Commit subjects of at most 72 characters (detail goes in the body), for every commit after the
rule was set; in a checkout without that history, the commit checked out."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.checkout import CHECKOUT

MAX_SUBJECT = 72
# The last commit before the rule: its ancestors keep their long subjects.
BEFORE_THE_RULE = "c222d3540f5960c2623feb766d89a732c0808293"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=CHECKOUT, capture_output=True, text=True, check=False)


def test_commit_subjects_fit_the_rule() -> None:
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode:
        pytest.skip("not a git checkout")
    known = _git("cat-file", "-e", f"{BEFORE_THE_RULE}^{{commit}}").returncode == 0
    revisions = ["HEAD", "--not", BEFORE_THE_RULE] if known else ["-1", "HEAD"]
    subjects = _git("log", "--format=%s", *revisions).stdout.splitlines()
    too_long = [subject for subject in subjects if len(subject) > MAX_SUBJECT]
    assert not too_long, f"commit subjects over {MAX_SUBJECT} characters: {too_long}"
