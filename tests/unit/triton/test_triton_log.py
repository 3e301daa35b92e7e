"""The package's log records reach `pb_utils.Logger` at Triton's levels."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from rps_serve.triton import triton_log
from rps_serve.triton.triton_log import TritonLogHandler, log_to_triton


class RecordingLogger:
    """`pb_utils.Logger`'s four static methods, each recording what it was given."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, method: str) -> object:
        return lambda message: self.lines.append((method, message))


class FakePbUtils:
    Logger = RecordingLogger()


@pytest.fixture
def pb_utils() -> Iterator[FakePbUtils]:
    package = logging.getLogger(triton_log.PACKAGE)
    handlers, level = list(package.handlers), package.level
    FakePbUtils.Logger = RecordingLogger()
    yield FakePbUtils()
    package.handlers, package.level = handlers, level


def test_each_level_goes_to_its_triton_method(pb_utils: FakePbUtils) -> None:
    log_to_triton(pb_utils)
    log_to_triton(pb_utils)  # a second model in the same stub installs nothing more
    logger = logging.getLogger("rps_serve.some.module")
    logger.debug("d %d", 1)
    logger.info("i")
    logger.warning("w")
    logger.error("e")
    assert pb_utils.Logger.lines == [
        ("log_verbose", "rps_serve.some.module: d 1"),
        ("log_info", "rps_serve.some.module: i"),
        ("log_warn", "rps_serve.some.module: w"),
        ("log_error", "rps_serve.some.module: e"),
    ]


def test_a_traceback_goes_with_its_record(pb_utils: FakePbUtils) -> None:
    log_to_triton(pb_utils)
    try:
        raise ValueError("broken")
    except ValueError:
        logging.getLogger("rps_serve.x").exception("failed")
    [(method, message)] = pb_utils.Logger.lines
    assert (
        method == "log_error"
        and message.startswith("rps_serve.x: failed\n")
        and "ValueError: broken" in message
    )


def test_a_forked_process_writes_to_stderr(
    pb_utils: FakePbUtils, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = TritonLogHandler(pb_utils.Logger)
    monkeypatch.setattr(os, "getpid", lambda: -1)
    for level in (logging.DEBUG, logging.WARNING):
        handler.handle(logging.LogRecord("rps_serve.engine", level, __file__, 1, "step", None, None))
    assert pb_utils.Logger.lines == []
    assert capsys.readouterr().err == "rps_serve.engine: step\n"
