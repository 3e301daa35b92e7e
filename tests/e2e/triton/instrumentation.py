"""The repository's own `preprocess` and `vllm_model` watched from inside a real server: each runs behind
`INSTRUMENTED_MODEL`, a subclass that
- leaves a file for every prompt it tokenizes (`Counts`);
- turns a response carrying an output its request did not ask for into an error naming the request
  (Triton 2.51's Python backend frees the numpy arrays of unrequested outputs without the GIL, fixed in
  2.53, which corrupted the `vllm_model` stub's heap under load: a model that builds one fails at once);
- records how every request ended (`Ends`): its final response, an empty final, or an error with its
  Triton error code, and whether the model had been told the request was cancelled.

Why record the ends inside: Triton 2.51's gRPC stream carries an error's message but not its code
(`triton_grpc_error`, the header that would add it, crashed this Triton in each of two runs of 200
fuzzed requests), and a
client that cancelled its stream hears nothing more, so only the model's side can show that an error
is `INVALID_ARG` or that a cancelled request ended with `CANCELLED` and not an empty final."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.triton.conftest import VLLM_MODEL

PREPROCESS = "preprocess"

INSTRUMENTED_MODEL = '''
import json
import locale
import os
import uuid
from pathlib import Path

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

import triton_python_backend_utils as pb_utils

from rps_serve.triton.{module} import TritonPythonModel as Served

COUNTS = Path({counts!r})
ENDS = Path({ends!r})
CODE_NAMES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
              "ALREADY_EXISTS", "CANCELLED")


def code_name(code):
    """The name of a TritonError code (pb_utils.TritonError exists once the stub serves requests)."""
    names = {{getattr(pb_utils.TritonError, n): n for n in CODE_NAMES if hasattr(pb_utils.TritonError, n)}}
    return names.get(code, str(code))


def checked(request, response):
    """`response`, or an error naming the outputs it carries that `request` did not ask for."""
    if response is None or response.has_error():
        return response
    extra = {{t.name() for t in response.output_tensors()}} - set(request.requested_output_names())
    if not extra:
        return response
    message = f"request {{json.dumps(request.request_id())}}: unrequested outputs {{sorted(extra)}}"
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


def record_end(request, response, cancelled):
    """Leave a file in ENDS saying how `request` ended; written whole before the response goes out."""
    end = {{"model": "{name}", "request_id": request.request_id(), "cancelled": cancelled}}
    if response is None:
        end.update(end="empty final")
    elif response.has_error():
        error = response.error()
        end.update(end="error", code=code_name(error.code()), message=error.message())
    else:
        end.update(end="response")
    path = ENDS / f"{name}-{{uuid.uuid4().hex}}"
    path.with_suffix(".tmp").write_text(json.dumps(end))
    os.replace(path.with_suffix(".tmp"), path.with_suffix(".json"))


class CheckedSender:
    def __init__(self, request, sender):
        self.request, self.sender = request, sender
        self.cancelled = False

    def send(self, response=None, flags=0):
        response = checked(self.request, response)
        if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            record_end(self.request, response, self.cancelled)
        if response is None:
            return self.sender.send(flags=flags)
        return self.sender.send(response, flags=flags)

    def is_cancelled(self):
        cancelled = self.sender.is_cancelled()
        self.cancelled = self.cancelled or cancelled
        return cancelled


def check_senders(request_type):
    """Route every response a decoupled model sends through `checked` and `record_end` (the request
    type exists only once the stub serves requests)."""
    if not hasattr(request_type, "unchecked_response_sender"):
        request_type.unchecked_response_sender = request_type.get_response_sender
        request_type.get_response_sender = lambda request: CheckedSender(
            request, request.unchecked_response_sender()
        )


class TritonPythonModel(Served):
    """The real {name}: every prompt it tokenizes leaves a `{name}-*` file in COUNTS; every response it
    sends goes through `checked`, and every request's end is recorded in ENDS."""

    def initialize(self, args):
        super().initialize(args)
        counter = self.preprocessor.counter
        count = counter.count

        def counted(*args, **kwargs):
            (COUNTS / f"{name}-{{uuid.uuid4().hex}}").touch()
            return count(*args, **kwargs)

        counter.count = counted

    def execute(self, requests):
        check_senders(type(requests[0]))
        responses = super().execute(requests)
        if responses is None:  # decoupled: the responses go through the senders
            return None
        responses = [checked(q, r) for q, r in zip(requests, responses)]
        for request, response in zip(requests, responses):
            record_end(request, response, False)
        return responses
'''


def instrumented_models(counts: Path, ends: Path) -> dict[str, str]:
    """`start_server`'s `model_files`: `preprocess` and `vllm_model` behind `INSTRUMENTED_MODEL`."""
    return {
        name: INSTRUMENTED_MODEL.format(module=module, counts=str(counts), ends=str(ends), name=name)
        for name, module in ((PREPROCESS, "preprocess_model"), (VLLM_MODEL, "vllm_model"))
    }


class Counts:
    """The prompts each instrumented model has tokenized, by the files it left."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def of(self, model: str) -> int:
        return len(list(self.directory.glob(f"{model}-*")))


@dataclass(frozen=True)
class End:
    """How one request ended in an instrumented model: `end` is "response", "empty final" or "error"
    (with its Triton error `code`, e.g. "INVALID_ARG", and `message`); `cancelled` says whether the model
    had been told (`is_cancelled()`) that the request was cancelled before it ended it."""

    model: str
    request_id: str
    cancelled: bool
    end: str
    code: str | None = None
    message: str | None = None


class Ends:
    """The ends the instrumented models recorded, one file each; `mark` and `since` pick those of a span."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def mark(self) -> frozenset[Path]:
        return frozenset(self.directory.glob("*.json"))

    def since(self, mark: frozenset[Path]) -> list[End]:
        """The ends recorded since `mark` was taken."""
        paths = sorted(set(self.directory.glob("*.json")) - mark)
        return [End(**json.loads(path.read_text())) for path in paths]
