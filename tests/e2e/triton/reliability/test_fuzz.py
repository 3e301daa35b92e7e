"""Random and malformed requests to both models: each ends with a response or an `INVALID_ARG` error,
and afterwards the server still serves.

The code is read where the error is made: Triton 2.51's gRPC stream carries an error's message but not
its code, so the server's instrumented models (`instrumentation.Ends`) record the code of every error
they send. What no model sees, Triton refuses itself before any model runs (`TRITON_REFUSAL`)."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from tests.e2e.triton.conftest import MODELS, Requests, Server, run, serves, wait_drained
from tests.e2e.triton.instrumentation import Ends
from tests.fuzzing import (
    INPUT_NAMES,
    any_tensor,
    base64_field,
    fuzz_settings,
    image_bytes,
    prompt_text,
    sampling_json,
    video_bytes,
)
from tests.prompts import chat_prompt

# Triton's own refusals of inputs the model's config does not declare, before any model runs: a
# datatype or shape it does not take, an input it does not know, required inputs missing (Triton's core
# raises each as INVALID_ARG; its 2.51 gRPC stream carries only the message).
TRITON_REFUSAL = re.compile(
    r"(\[request id: [^\]]*\] )?("
    r"inference input '[^']+' data-type is '\w+', but model '[^']+' expects '\w+'"
    r"|unexpected inference input '[^']+' for model '[^']+'"
    r"|unexpected shape for input '[^']+' for model '[^']+'\. Expected \[[-\d, ]*\], got \[[-\d, ]*\]"
    r"|expected number of inputs between \d+ and \d+ but got \d+ inputs for model '[^']+'"
    r")"
)
WELL_FORMED_SAMPLING = st.fixed_dictionaries(
    {"max_tokens": st.integers(1, 8)},
    optional={"temperature": st.floats(0, 2), "seed": st.integers(0, 2**32)},
)


@st.composite
def fuzzed_request(draw: st.DrawFn) -> dict[str, np.ndarray]:
    kind = draw(st.sampled_from(["consistent", "random", "raw"]))
    if kind == "raw":  # any dtype and shape per input, some missing: Triton or the parser refuses them
        return draw(
            st.dictionaries(
                st.sampled_from([*INPUT_NAMES, "unknown_input"]),
                any_tensor,
                max_size=6,
            )
        )
    tensors: dict[str, np.ndarray] = {}
    if kind == "consistent":  # markers matching the media, media maybe corrupt, sampling fuzzed
        modality = draw(st.sampled_from(list(Modality)))
        prompt = chat_prompt(draw(prompt_text), modality).encode()
        if modality is Modality.IMAGE:
            tensors[p.IMAGE] = np.array([base64.b64encode(draw(image_bytes))], dtype=np.object_)
        if modality is Modality.VIDEO:
            tensors[p.VIDEO] = np.array([base64.b64encode(draw(video_bytes))], dtype=np.object_)
    else:
        prompt = draw(st.one_of(prompt_text.map(str.encode), st.binary(max_size=100)))
        if draw(st.booleans()):
            tensors[p.IMAGE] = np.array(
                draw(st.lists(base64_field, min_size=1, max_size=3)), dtype=np.object_
            )
        if draw(st.booleans()):
            tensors[p.VIDEO] = np.array(
                [draw(st.one_of(base64_field, video_bytes.map(base64.b64encode)))], dtype=np.object_
            )
    tensors[p.TEXT_INPUT] = np.array([prompt], dtype=np.object_)
    sampling = draw(st.one_of(sampling_json, WELL_FORMED_SAMPLING.map(lambda d: json.dumps(d).encode())))
    tensors[p.SAMPLING_PARAMETERS] = np.array([sampling], dtype=np.object_)
    tensors[p.STREAM] = np.array([draw(st.booleans())])
    tensors[p.EXCLUDE_INPUT_IN_OUTPUT] = np.array([draw(st.booleans())])
    return tensors


@fuzz_settings(40)
@given(model=st.sampled_from(MODELS), tensors=fuzzed_request())
def test_fuzzed_requests_are_all_answered(
    server: Server, ends: Ends, model: str, tensors: dict[str, np.ndarray]
) -> None:
    """Every error a model sends is `INVALID_ARG` and is the one the client hears; an error no model
    sent is one of Triton's own refusals of the inputs."""
    mark = ends.mark()
    result = run(server, model, tensors, timeout_s=120)  # raises TimeoutError if it never ends
    assert result.done_s is not None
    errors = [end for end in ends.since(mark) if end.end == "error"]
    assert all(end.code == "INVALID_ARG" for end in errors), errors
    if result.error is None:
        assert not errors, errors
    elif errors:  # the client heard the model's error (through the ensemble, prefixed by Triton)
        assert any(end.message and end.message in result.error for end in errors), (result.error, errors)
    else:
        assert TRITON_REFUSAL.match(result.error), result.error


def test_server_serves_after_the_fuzzing(server: Server, requests: Requests) -> None:
    serves(server, requests)
    wait_drained(server)
