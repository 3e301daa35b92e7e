"""One real server for the tests that watch the repository's own models from inside: `preprocess` and
`vllm_model` each run behind `INSTRUMENTED_MODEL`, a subclass that leaves a file for every prompt it
tokenizes (`Counts`) and turns a response carrying an output its request did not ask for into an error
naming the request.

Why the check: Triton 2.51's Python backend frees the numpy arrays of unrequested outputs without the
GIL (fixed in 2.53), which corrupted the `vllm_model` stub's heap under load; a model that builds one
fails these tests at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.triton.conftest import VLLM_MODEL, Server, start_server

PREPROCESS = "preprocess"

INSTRUMENTED_MODEL = '''
import json
import locale
import uuid
from pathlib import Path

locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

import triton_python_backend_utils as pb_utils

from rps_serve.triton.{module} import TritonPythonModel as Served

COUNTS = Path({counts!r})


def checked(request, response):
    """`response`, or an error naming the outputs it carries that `request` did not ask for."""
    if response is None or response.has_error():
        return response
    extra = {{t.name() for t in response.output_tensors()}} - set(request.requested_output_names())
    if not extra:
        return response
    message = f"request {{json.dumps(request.request_id())}}: unrequested outputs {{sorted(extra)}}"
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


class CheckedSender:
    def __init__(self, request, sender):
        self.request, self.sender = request, sender

    def send(self, response=None, flags=0):
        response = checked(self.request, response)
        if response is None:
            return self.sender.send(flags=flags)
        return self.sender.send(response, flags=flags)

    def is_cancelled(self):
        return self.sender.is_cancelled()


def check_senders(request_type):
    """Route every response a decoupled model sends through `checked` (the request type exists only
    once the stub serves requests)."""
    if not hasattr(request_type, "unchecked_response_sender"):
        request_type.unchecked_response_sender = request_type.get_response_sender
        request_type.get_response_sender = lambda request: CheckedSender(
            request, request.unchecked_response_sender()
        )


class TritonPythonModel(Served):
    """The real {name}: every prompt it tokenizes leaves a `{name}-*` file in COUNTS; every response it
    sends goes through `checked`."""

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
        return [checked(q, r) for q, r in zip(requests, responses)]
'''


class Counts:
    """The prompts each instrumented model has tokenized, by the files it left."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def of(self, model: str) -> int:
        return len(list(self.directory.glob(f"{model}-*")))


@pytest.fixture(scope="package")
def counts(tmp_path_factory: pytest.TempPathFactory) -> Counts:
    return Counts(tmp_path_factory.mktemp("counts"))


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory, counts: Counts) -> Iterator[Server]:
    models = {
        name: INSTRUMENTED_MODEL.format(module=module, counts=str(counts.directory), name=name)
        for name, module in ((PREPROCESS, "preprocess_model"), (VLLM_MODEL, "vllm_model"))
    }
    with start_server(tmp_path_factory, model_files=models) as running:
        yield running
