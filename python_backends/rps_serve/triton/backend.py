"""Helpers shared by the Python-backend models: reading inputs, building tensors and error responses.

`pb_utils` (triton_python_backend_utils) exists only inside Triton's Python-backend stub, so the models
pass it in; nothing here imports it.
"""

from __future__ import annotations

import logging
import sys
from concurrent.futures import Future
from typing import Any

import numpy as np

from rps_serve.triton.protocol import TensorGetter


def tensor_getter(pb_utils: Any, request: Any) -> TensorGetter:
    def get(name: str) -> np.ndarray | None:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    return get


def string_tensor(pb_utils: Any, name: str, value: str | bytes) -> Any:
    data = value if isinstance(value, bytes) else value.encode("utf-8")
    return pb_utils.Tensor(name, np.array([data], dtype=np.object_))


def error_response(pb_utils: Any, message: str, code: str | None = None) -> Any:
    """An error response with `code`, a `TritonError` code's name (INVALID_ARG for the client's
    mistakes, UNAVAILABLE for overload), where this Triton knows error codes; INTERNAL otherwise."""
    known = getattr(pb_utils.TritonError, code, None) if code else None
    error = pb_utils.TritonError(message) if known is None else pb_utils.TritonError(message, known)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


def configure_logging() -> None:
    """Send the package's logs to the stub's stderr, which Triton writes to its own log."""
    package = logging.getLogger("rps_serve")
    if not package.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        package.addHandler(handler)
        package.setLevel(logging.INFO)


def log_failure(future: Future[Any]) -> None:
    """Done-callback for work handed to another thread, whose exceptions nobody else would see."""
    if not future.cancelled() and (error := future.exception()) is not None:
        logging.getLogger("rps_serve.triton").error("background task failed", exc_info=error)
