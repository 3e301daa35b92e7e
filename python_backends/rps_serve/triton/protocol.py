"""The request interface of the repository's models: tensor names, and parsing into a validated request.

Inputs follow NVIDIA's vLLM backend (`text_input`, `image` as base64 strings, `stream`,
`sampling_parameters` as JSON, or the request's own parameters where that tensor is absent,
`exclude_input_in_output`, the `return_*` flags of its additional outputs) and add `video` (base64 of
a video file); its `embedding_request` is refused by name.
Parsing takes a tensor getter, so the same code serves every model and runs without Triton in tests.
docs/triton.md has the table of where the interface matches vllm_backend's and where it differs.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rps_serve.cost import features as cols
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.triton.names import ENGINE_STATE as ENGINE_STATE
from rps_serve.triton.names import ENSEMBLE as ENSEMBLE
from rps_serve.triton.names import HEALTH as HEALTH
from rps_serve.triton.names import SETTINGS_FILE as SETTINGS_FILE
from rps_serve.triton.names import SETTINGS_NAME as SETTINGS_NAME
from rps_serve.triton.names import VLLM_MODEL as VLLM_MODEL

TEXT_INPUT = "text_input"
IMAGE = "image"
VIDEO = "video"
STREAM = "stream"
SAMPLING_PARAMETERS = "sampling_parameters"
EXCLUDE_INPUT_IN_OUTPUT = "exclude_input_in_output"
# Where vllm_backend reads sampling parameters when a request carries no `sampling_parameters` tensor:
# the request's own Triton parameters (`request.parameters()`, a JSON object; Triton keeps its reserved
# ones, priority, timeout, the final-response flag, out of it)
REQUEST_PARAMETERS = "request parameters"
# vllm_backend's input for the embedding requests of its OpenAI-compatible front end; refused here
EMBEDDING_REQUEST = "embedding_request"

# preprocess outputs
PROMPT = "prompt"
FEATURES = "features"

# vllm_model inputs that carry the class computed by the ensemble
CLASS_LEVEL = "rps_class_level"  # int64 [1]
CLASS_DISTANCES = "rps_class_distances"  # float32 [1, k]: its width is the number of classes
COST = "rps_cost"  # float32 [1, 3]: the Impact Estimator's output
# float32 [1, 3]: the cost features `preprocess` counted (modality index, prompt tokens, modality
# tokens), so that vllm_model checks them against the request instead of tokenizing it again
CLAIMED_FEATURES = "rps_features"

# A vllm_model request carrying `rps_assess` (float32 [n, 3], the cost model's feature rows: modality
# index, prompt tokens, modality tokens) is answered at once with how the model would class each row
# now, and generates nothing: what `rps-serve classify --url` asks.
ASSESS = "rps_assess"
ASSESSED_LEVEL = "rps_assessed_level"  # int64 [n]
ASSESSED_PREFILL_S = "rps_assessed_prefill_s"  # float32 [n]
ASSESSED_KV_TOKENS = "rps_assessed_kv_tokens"  # int64 [n]
NUM_CLASSES = "rps_num_classes"  # int64 [1]
MAX_ASSESSED = 4096  # rows in one assessment


# vllm_model / ensemble outputs
TEXT_OUTPUT = "text_output"
RPS_CLASS = "rps_class"
EST_PREFILL_S = "est_prefill_s"
# vllm_backend's additional outputs: each is sent only when the request's BOOL input `return_<name>`
# (`return_flag`) is true, as there (`triton.additional_outputs` computes them).
FINISH_REASON = "finish_reason"
CUMULATIVE_LOGPROB = "cumulative_logprob"
LOGPROBS = "logprobs"
NUM_INPUT_TOKENS = "num_input_tokens"
NUM_OUTPUT_TOKENS = "num_output_tokens"
ADDITIONAL_OUTPUTS = (FINISH_REASON, CUMULATIVE_LOGPROB, LOGPROBS, NUM_INPUT_TOKENS, NUM_OUTPUT_TOKENS)


def return_flag(output: str) -> str:
    """The input that asks for additional output `output`: `return_finish_reason` for `finish_reason`."""
    return f"return_{output}"


def outputs_to_send(requested: Collection[str], asked: Collection[str]) -> frozenset[str]:
    """The outputs a generate response carries: those the request names (Triton names every output of
    the config for a client that names none), less the additional outputs its `return_*` flags did not
    ask for. A flag alone does not add an output the request does not name: Triton 2.51's Python backend
    must not be sent an unrequested output (see `backend.requested_outputs`)."""
    return frozenset(name for name in requested if name not in ADDITIONAL_OUTPUTS or name in asked)


TensorGetter = Callable[[str], np.ndarray | None]


# In the message of a request refused because the server holds too many: a gRPC stream carries an
# error's message but not its code (UNAVAILABLE), so clients tell overload from failure by this.
OVERLOADED = "overloaded"


def is_refusal(message: str) -> bool:
    """Whether an error message is an overload refusal (retry later) rather than a failure."""
    return OVERLOADED in message


# In the message of a request failed or refused because the engine died and is being restarted in place:
# retrying once the engine is back (or on another server) can succeed.
RESTARTING = "engine restarting"


# In the error a client of ours gives a request that heard nothing from the server for too long.
SILENCE = "no response"


def is_retryable(message: str) -> bool:
    """Whether an error message says the server could not take the request now, not that it is bad."""
    return OVERLOADED in message or RESTARTING in message


# Error messages start with the id the client gave its request, JSON-quoted: tritonclient's gRPC stream
# callback gets an error without the response's id, so on a stream shared by many requests the message
# is the only place that can say whose error it is.
_ATTRIBUTED = re.compile(r'request ("(?:[^"\\]|\\.)*"): ')
# Reprs such as "<_io.BytesIO object at 0x7f...>" say nothing to a client and leak addresses.
_OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def attributed(request_id: str, message: str) -> str:
    """`message` as the error of the request the client called `request_id` (unchanged without an id)."""
    message = _OBJECT_REPR.sub("<object>", message)
    return f"request {json.dumps(request_id)}: {message}" if request_id else message


def attributed_request(message: str) -> str | None:
    """The request id an error message names (see `attributed`), wherever Triton put it in the message
    (the ensemble prefixes its own words); None if it names none."""
    match = _ATTRIBUTED.search(message)
    return None if match is None else str(json.loads(match.group(1)))


class BadRequest(ValueError):
    """A request the server refuses; the message is sent back to the client as the error."""


@dataclass(frozen=True)
class GenerateRequest:
    """A parsed request. Media is still encoded: `images` and `video` hold the decoded base64 bytes."""

    prompt: str
    images: tuple[bytes, ...] = ()
    video: bytes | None = None
    stream: bool = False
    sampling_parameters: Mapping[str, Any] = field(default_factory=dict)
    # What the sampling parameters came in, as an error message names it (`sampling_source`)
    sampling_source: str = f"'{SAMPLING_PARAMETERS}'"
    # Whether a non-streamed answer leaves out the prompt (a streamed one always does)
    exclude_input_in_output: bool = False
    additional_outputs: frozenset[str] = frozenset()  # those of ADDITIONAL_OUTPUTS the request asks for


def _strings(value: np.ndarray) -> list[bytes]:
    return [v if isinstance(v, bytes) else str(v).encode() for v in value.reshape(-1)]


def _one_string(get: TensorGetter, name: str) -> bytes | None:
    value = get(name)
    if value is None or value.size == 0:
        return None
    items = _strings(value)
    if len(items) != 1:
        raise BadRequest(f"'{name}' must hold one element, got {len(items)}")
    return items[0]


def _flag(get: TensorGetter, name: str, default: bool) -> bool:
    given = _given_flag(get, name)
    return default if given is None else given


def _given_flag(get: TensorGetter, name: str) -> bool | None:
    """The request's boolean `name`; None if it does not carry one."""
    value = get(name)
    if value is None or value.size == 0:
        return None
    if value.size != 1:
        raise BadRequest(f"'{name}' must hold one boolean, got {value.size} elements")
    return bool(value.reshape(-1)[0])


def _exclude_input_in_output(get: TensorGetter, stream: bool) -> bool:
    """As vllm_backend: unset, a streamed answer leaves out the prompt and a whole one starts with it;
    set false on a streamed request, it is refused (streamed responses never repeat the prompt)."""
    given = _given_flag(get, EXCLUDE_INPUT_IN_OUTPUT)
    if given is None:
        return stream
    if stream and not given:
        raise BadRequest(
            f"'{EXCLUDE_INPUT_IN_OUTPUT}' false is not allowed when streaming (as in NVIDIA's vLLM "
            "backend): streamed responses never repeat the prompt; leave it out or set it true"
        )
    return given


def _base64(data: bytes, what: str) -> bytes:
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError) as error:
        raise BadRequest(f"{what} is not valid base64: {error}") from None


def parse_sampling_parameters(raw: bytes | None) -> dict[str, Any]:
    """The JSON object of sampling parameters; an absent or empty value means vLLM's defaults."""
    if raw is None or not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadRequest(f"'{SAMPLING_PARAMETERS}' is not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise BadRequest(f"'{SAMPLING_PARAMETERS}' must be a JSON object, got {type(parsed).__name__}")
    return parsed


def request_parameters(raw: str | None) -> dict[str, Any]:
    """A request's own Triton parameters (the Python backend's `request.parameters()`, JSON)."""
    if raw is None or not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise BadRequest(f"the {REQUEST_PARAMETERS} are not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise BadRequest(f"the {REQUEST_PARAMETERS} must be an object, got {type(parsed).__name__}")
    return parsed


def sampling_source(from_tensor: bool) -> str:
    """What a request's sampling parameters came in, as error messages name it."""
    return f"'{SAMPLING_PARAMETERS}'" if from_tensor else REQUEST_PARAMETERS


def _sampling(get: TensorGetter, parameters: str | None) -> tuple[dict[str, Any], str]:
    """The request's sampling parameters and what they came in. As vllm_backend: the
    `sampling_parameters` tensor where the request carries one, else its own parameters. Where it
    carries both, vllm_backend ignores the parameters; here they are refused unless the tensor holds
    the same (as it does in a step of `rps_ensemble`: Triton hands the ensemble's parameters to every
    step, and `preprocess` put them in the tensor)."""
    given = request_parameters(parameters)
    tensor = _one_string(get, SAMPLING_PARAMETERS)
    if tensor is None:
        return given, sampling_source(from_tensor=False)
    sampling = parse_sampling_parameters(tensor)
    beside = sorted(key for key, value in given.items() if key not in sampling or sampling[key] != value)
    if beside:
        raise BadRequest(
            f"{REQUEST_PARAMETERS} {', '.join(repr(key) for key in beside)} sent beside "
            f"'{SAMPLING_PARAMETERS}', which vllm_backend would read alone; send the sampling "
            "parameters in one of them"
        )
    # In a step of the ensemble the client sent them as parameters; errors name what the client sent.
    return sampling, sampling_source(from_tensor=not given or given != sampling)


def parse_request(get: TensorGetter, parameters: str | None = None) -> GenerateRequest:
    """Validate the request's tensors, and `parameters`, its own Triton parameters (JSON) where it
    has them; raises `BadRequest` with a message for the client."""
    if get(EMBEDDING_REQUEST) is not None:
        raise BadRequest(
            f"'{EMBEDDING_REQUEST}' is not served: this deployment generates text (vllm_backend reserves "
            f"the input for its OpenAI-compatible front end's embeddings); send '{TEXT_INPUT}'"
        )
    text = _one_string(get, TEXT_INPUT)
    if text is None:
        raise BadRequest(f"'{TEXT_INPUT}' is required")
    try:
        prompt = text.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"'{TEXT_INPUT}' is not UTF-8") from None
    image_tensor = get(IMAGE)
    images = () if image_tensor is None else _strings(image_tensor)
    video = _one_string(get, VIDEO)
    stream = _flag(get, STREAM, default=False)
    sampling, source = _sampling(get, parameters)
    return GenerateRequest(
        prompt=prompt,
        images=tuple(_base64(image, f"image {i}") for i, image in enumerate(images)),
        video=None if video is None else _base64(video, "video"),
        stream=stream,
        sampling_parameters=sampling,
        sampling_source=source,
        exclude_input_in_output=_exclude_input_in_output(get, stream),
        additional_outputs=frozenset(
            name for name in ADDITIONAL_OUTPUTS if _flag(get, return_flag(name), default=False)
        ),
    )


def parse_assessment(matrix: np.ndarray) -> list[RequestFeatures]:
    """The requests an `ASSESS` tensor describes; raises `BadRequest` with a message for the client."""
    return _feature_rows(matrix, ASSESS, MAX_ASSESSED)


def claimed_features(get: TensorGetter) -> RequestFeatures | None:
    """The features the ensemble's `preprocess` counted for the request, if it carries them."""
    matrix = get(CLAIMED_FEATURES)
    if matrix is None or matrix.size == 0:
        return None
    (features,) = _feature_rows(matrix, CLAIMED_FEATURES, max_rows=1)
    return features


def _feature_rows(matrix: np.ndarray, name: str, max_rows: int) -> list[RequestFeatures]:
    """The cost model's feature rows in tensor `name`, at most `max_rows`; `BadRequest` unless valid."""
    if matrix.ndim != 2 or matrix.shape[1] != cols.NUM_FEATURES or not 0 < len(matrix) <= max_rows:
        shape = list(matrix.shape)
        raise BadRequest(f"'{name}' must be [n, {cols.NUM_FEATURES}], 0 < n <= {max_rows}; got {shape}")
    if not np.isfinite(matrix).all() or (matrix != np.round(matrix)).any():
        raise BadRequest(f"'{name}' must hold whole numbers")
    modalities = matrix[:, cols.MODALITY]
    if ((modalities < 0) | (modalities >= len(Modality))).any():
        raise BadRequest(f"'{name}': a modality index is outside 0..{len(Modality) - 1}")
    try:
        return cols.requests_of(matrix)
    except ValueError as error:  # negative token counts, or more modality tokens than prompt tokens
        raise BadRequest(f"'{name}': {error}") from None
