"""`rps_serve.backend_check` on the CPU stack's real server tree (the one every e2e server runs): the
repository's backends are all there, and the check fails once one of them is taken away."""

from __future__ import annotations

from pathlib import Path

import pytest

from rps_harness.local.server import prepare_server_tree
from rps_serve.backend_check import main, missing_backends, repository_backends
from tests.checkout import REPOSITORY


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_server_tree(tmp_path_factory.mktemp("server")) / "backends"


def _without(backends: Path, removed: str, into: Path) -> Path:
    """A backend directory holding every backend of `backends` but `removed` (links, no copies)."""
    into.mkdir()
    for backend in backends.iterdir():
        if backend.name != removed:
            (into / backend.name).symlink_to(backend, target_is_directory=True)
    return into


def test_the_repository_names_python_and_onnxruntime() -> None:
    named = {need.model: need.backend for need in repository_backends(REPOSITORY)}
    assert named["impact_estimator"] == named["request_classifier"] == "onnxruntime"
    assert named["preprocess"] == named["vllm_model"] == "python"
    assert named["rps_ensemble"] is None


def test_the_cpu_stacks_server_has_every_backend(backends: Path) -> None:
    assert missing_backends(REPOSITORY, backends) == []
    assert main([str(REPOSITORY), "--backend-directory", str(backends)]) == 0


ONNX_MODELS = {"impact_estimator", "request_classifier"}


@pytest.mark.parametrize(
    ("removed", "failing"),
    # The ONNX stand-in is a Python-based backend: without the python backend it cannot run either.
    [("onnxruntime", ONNX_MODELS), ("python", {*ONNX_MODELS, "preprocess", "vllm_model"})],
)
def test_a_removed_backend_fails_the_check(
    backends: Path, removed: str, failing: set[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stripped = _without(backends, removed, tmp_path / "backends")
    assert {line.split("'")[1] for line in missing_backends(REPOSITORY, stripped)} == failing
    assert main([str(REPOSITORY), "--backend-directory", str(stripped)]) == 1
    assert f"needs backend '{removed}'" in capsys.readouterr().err


def test_a_backend_library_in_the_models_directory_counts(tmp_path: Path) -> None:
    model = tmp_path / "repository" / "custom"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('name: "custom"\nbackend: "identity"\n')
    assert len(missing_backends(model.parent, tmp_path)) == 1
    (model / "1" / "libtriton_identity.so").write_bytes(b"")
    assert missing_backends(model.parent, tmp_path) == []


def test_an_unknown_platform_is_named(tmp_path: Path) -> None:
    model = tmp_path / "odd"
    model.mkdir()
    (model / "config.pbtxt").write_text('platform: "caffe2_netdef"\n')
    with pytest.raises(ValueError, match="caffe2_netdef"):
        repository_backends(tmp_path)
