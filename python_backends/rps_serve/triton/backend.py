"""Helpers shared by the Python-backend models: reading inputs, building tensors and error responses.

`pb_utils` (triton_python_backend_utils) exists only inside Triton's Python-backend stub, so the models
pass it in; nothing here imports it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from rps_serve.triton.protocol import TensorGetter, attributed


def tensor_getter(pb_utils: Any, request: Any) -> TensorGetter:
    def get(name: str) -> np.ndarray | None:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    return get


def string_tensor(pb_utils: Any, name: str, value: str | bytes) -> Any:
    data = value if isinstance(value, bytes) else value.encode("utf-8")
    return pb_utils.Tensor(name, np.array([data], dtype=np.object_))


def requested_outputs(
    pb_utils: Any, wanted: Collection[str], outputs: Mapping[str, Callable[[], np.ndarray | str | bytes]]
) -> list[Any]:
    """The tensors of the outputs in `wanted`, a request's `requested_output_names()` (Triton fills in
    every output of the config when a client names none); the others are never built.

    Triton 2.51's Python backend prunes unrequested outputs after releasing the GIL, freeing their numpy
    arrays without it (fixed in 2.53): under load that corrupts the stub's heap, so none may be sent.
    Triton 2.53 (container 24.12, python_backend PR #390) and later, 26.10 among them, hold the GIL
    there; kept on every release, as building only what was asked for costs nothing.
    """
    tensors = []
    for name, value in outputs.items():
        if name not in wanted:
            continue
        data = value()
        if isinstance(data, str | bytes):
            tensors.append(string_tensor(pb_utils, name, data))
        else:
            tensors.append(pb_utils.Tensor(name, data))
    return tensors


def error_response(pb_utils: Any, request_id: str, message: str, code: str | None = None) -> Any:
    """An error response naming the request (`protocol.attributed`) with `code`, a `TritonError` code's
    name (INVALID_ARG for the client's mistakes, UNAVAILABLE for overload), where this Triton knows error
    codes; INTERNAL otherwise."""
    message = attributed(request_id, message)
    known = getattr(pb_utils.TritonError, code, None) if code else None
    error = pb_utils.TritonError(message) if known is None else pb_utils.TritonError(message, known)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


def log_failure(future: Future[Any]) -> None:
    """Done-callback for work handed to another thread, whose exceptions nobody else would see."""
    if not future.cancelled() and (error := future.exception()) is not None:
        logging.getLogger("rps_serve.triton").error("background task failed", exc_info=error)
