"""The package's `logging` records written to Triton's log through `pb_utils.Logger`, as NVIDIA's vLLM
backend logs, so that the server's `--log-info`, `--log-warning`, `--log-error` and `--log-verbose`
decide what is written; library modules keep logging as they do outside Triton."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

PACKAGE = "rps_serve"


class TritonLogHandler(logging.Handler):
    """Forwards each record to `pb_utils.Logger` at its level; debug records are Triton's verbose ones."""

    def __init__(self, pb_logger: Any) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self._logger = pb_logger
        self._pid = os.getpid()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            if os.getpid() != self._pid:
                # A process forked from the stub (vLLM's engine core) has no channel to Triton; the
                # server writes the stub's stderr, which such a process inherits, to its log.
                if record.levelno >= logging.INFO:
                    sys.stderr.write(message + "\n")
            elif record.levelno >= logging.ERROR:
                self._logger.log_error(message)
            elif record.levelno >= logging.WARNING:
                self._logger.log_warn(message)
            elif record.levelno >= logging.INFO:
                self._logger.log_info(message)
            else:
                self._logger.log_verbose(message)
        except Exception:
            self.handleError(record)


def log_to_triton(pb_utils: Any) -> None:
    """Send the package's records at every level to Triton's log (once per process): the server's log
    flags, not this package, choose which are written."""
    package = logging.getLogger(PACKAGE)
    if not any(isinstance(handler, TritonLogHandler) for handler in package.handlers):
        package.addHandler(TritonLogHandler(pb_utils.Logger))
    package.setLevel(logging.DEBUG)
