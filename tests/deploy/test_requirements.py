"""requirements/*.txt and docker/requirements.txt say what pyproject.toml declares (tools/requirements.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tools.requirements import DERIVED, differing, read_project, requirements_of

from tests.checkout import CHECKOUT


def test_the_derived_files_are_what_pyproject_declares() -> None:
    assert differing() == []


def _copy(checkout: Path) -> None:
    for path in ["pyproject.toml", *(d.path for d in DERIVED)]:
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / path, checkout / path)


def test_a_pin_changed_in_pyproject_alone_is_caught(tmp_path: Path) -> None:
    _copy(tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('"nvidia-pytriton==0.7.0"', '"nvidia-pytriton==0.7.1"')
    )
    assert differing(tmp_path) == ["requirements/triton.txt"]


def test_a_derived_file_edited_by_hand_is_caught(tmp_path: Path) -> None:
    _copy(tmp_path)
    (tmp_path / "docker" / "requirements.txt").write_text("scikit-learn\n")
    assert differing(tmp_path) == ["docker/requirements.txt"]


def test_the_projects_own_extras_are_expanded() -> None:
    declared = read_project()
    client = requirements_of(declared, "client")
    assert "matplotlib>=3.7" in client
    assert not [r for r in client if r.startswith("rps-serve")]
