"""The start-up line naming the Triton release a server runs on, a warning where the tests never ran it."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from rps_harness.local.server import BUNDLED_SERVER_VERSION, server_environment
from rps_serve.triton import server_release as sr
from tests.checkout import CHECKOUT


def _line(caplog: pytest.LogCaptureFixture, environ: dict[str, str]) -> logging.LogRecord:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=sr.__name__):
        sr.log_triton_release(environ)
    (record,) = [r for r in caplog.records if r.name == sr.__name__]
    return record


def test_a_tested_release_is_named_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    record = _line(caplog, {sr.SERVER_VERSION_ENV: "2.51.0"})
    assert record.levelno == logging.INFO
    assert "2.51.0 (container 24.10)" in record.getMessage()
    assert _line(caplog, {sr.CONTAINER_VERSION_ENV: "24.10"}).levelno == logging.INFO


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({sr.SERVER_VERSION_ENV: "2.74.0", sr.CONTAINER_VERSION_ENV: "26.10"}, "2.74.0 (container 26.10)"),
        ({sr.SERVER_VERSION_ENV: "2.74.0"}, "2.74.0 (container 26.10)"),
        ({sr.SERVER_VERSION_ENV: "2.99.0"}, "2.99.0"),
        ({sr.CONTAINER_VERSION_ENV: "27.01"}, "container 27.01"),
    ],
)
def test_an_untested_release_logs_one_warning_naming_it_and_the_tested_ones(
    caplog: pytest.LogCaptureFixture, environ: dict[str, str], named: str
) -> None:
    record = _line(caplog, environ)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert f"Triton Inference Server {named} is a release RPS-Serve has not been tested on" in message
    assert "tested: 2.51.0 (container 24.10)" in message
    assert ("image's base" in message) == (
        sr.running_release(environ).container == sr.IMAGE_CONTAINER_RELEASE
    )


def test_an_unknown_release_says_which_variables_it_looked_for(caplog: pytest.LogCaptureFixture) -> None:
    record = _line(caplog, {"PATH": "/usr/bin"})
    assert record.levelno == logging.WARNING
    assert sr.SERVER_VERSION_ENV in record.getMessage() and sr.CONTAINER_VERSION_ENV in record.getMessage()


def test_the_image_release_is_the_dockerfiles_base() -> None:
    """Bumping the image's TRITON_TAG means naming its server version here and reviewing the
    workarounds' table (docs/deploy.md)."""
    dockerfile = (CHECKOUT / "docker" / "Dockerfile").read_text()
    assert f"ARG TRITON_TAG={sr.IMAGE_CONTAINER_RELEASE}\n" in dockerfile
    assert sr.IMAGE_CONTAINER_RELEASE in sr.CONTAINER_OF.values()
    assert set(sr.TESTED_SERVER_VERSIONS) <= set(sr.CONTAINER_OF)


def test_the_local_server_names_its_release_as_nvidias_containers_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's server is the one the wheel ships, and it is a tested release; a container
    release inherited from the caller's environment does not describe it."""
    assert importlib.metadata.version("nvidia-pytriton") == "0.7.0"  # whose server is BUNDLED_SERVER_VERSION
    monkeypatch.setenv(sr.CONTAINER_VERSION_ENV, "26.10")
    env = server_environment()
    assert env[sr.SERVER_VERSION_ENV] == BUNDLED_SERVER_VERSION
    assert sr.running_release(env).tested


class _StandIn:
    """What `preprocess.initialize` builds, without a tokenizer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.limits = "limits"
        self.processor = types.SimpleNamespace(image_token="<image>", video_token="<video>")


def test_preprocess_logs_the_release_when_the_server_loads_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """The line comes from `preprocess`'s `initialize`, the one instance every repository loads."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("pb_utils"))
    monkeypatch.delitem(sys.modules, "rps_serve.triton.preprocess_model", raising=False)
    model = importlib.import_module("rps_serve.triton.preprocess_model")
    monkeypatch.setattr(model, "log_to_triton", lambda pb_utils: None)  # caplog reads the records
    monkeypatch.setattr(model, "load_settings", lambda *a, **k: types.SimpleNamespace(model="m", media=None))
    monkeypatch.setattr(model, "PromptTokenCounter", _StandIn)
    monkeypatch.setattr(model, "Preprocessor", _StandIn)
    monkeypatch.setenv(sr.SERVER_VERSION_ENV, "2.99.0")
    monkeypatch.delenv(sr.CONTAINER_VERSION_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger=sr.__name__):
        model.TritonPythonModel().initialize({"model_repository": str(tmp_path / "preprocess")})
    warnings = [r for r in caplog.records if r.name == sr.__name__ and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "2.99.0" in warnings[0].getMessage()
    monkeypatch.delitem(sys.modules, "rps_serve.triton.preprocess_model")
