"""Sampling parameters as NVIDIA's vllm_backend takes them: scalar values may come as strings.

They come in the `sampling_parameters` tensor or, where a request has none, in its own Triton
parameters (`protocol.parse_request`); a key that is no field of vLLM's `SamplingParams` is refused
with every such key named, wherever it came.

vllm_backend casts each value to the type vLLM's `SamplingParams` declares for it, and clients built
for it rely on that: GenAI-Perf sends `{"max_tokens": "16"}`. Here a string given for a field declared
int, float or bool (optional or not) is cast the same way; booleans read "true"/"false" and "1"/"0"
(vllm_backend's `bool("false")` would be True). Keys vllm_backend honours that this deployment does
not serve are refused by name, not passed to the engine: structured output (`structured_outputs`, or
vllm_backend's `guided_decoding`) and LoRA adapters (`lora_name`).
`sampling_params` builds a request's vLLM `SamplingParams` from them, within the model's limits and
with the class the RPS scheduler reads.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from rps_serve.triton import protocol as p
from rps_serve.triton.media import MediaLimits
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY

if typing.TYPE_CHECKING:
    from rps_serve.triton.classes import ClassInfo

_SCALARS = (bool, int, float)
SEED_MIN, SEED_END = -(2**63), 2**64  # what torch.Generator.manual_seed takes
_TRUE, _FALSE = ("true", "1"), ("false", "0")
REFUSED = {
    "structured_outputs": "structured output is not served by this deployment",
    "guided_decoding": "structured output (vllm_backend's guided_decoding) is not served by this deployment",
    "lora_name": "LoRA adapters are not served by this deployment",
}


@functools.cache
def declared_scalars(cls: type) -> Mapping[str, type]:
    """The fields of `cls` declared as bool, int or float, or as one of them or None."""
    scalars = {}
    for name, hint in typing.get_type_hints(cls).items():
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds = [option for option in options if option is not type(None)]
        if len(kinds) == 1 and kinds[0] in _SCALARS:
            scalars[name] = kinds[0]
    return scalars


def fields(cls: type) -> frozenset[str]:
    """The keyword arguments `cls` takes: a msgspec struct's fields (vLLM's `SamplingParams`)."""
    declared = getattr(cls, "__struct_fields__", None)
    return frozenset(declared if declared is not None else typing.get_type_hints(cls))


def _cast(name: str, value: str, kind: type, source: str) -> Any:
    text = value.strip()
    if kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
    else:
        try:
            return kind(text)
        except ValueError:
            pass
    raise p.BadRequest(f"invalid {source}: {name} must be {kind.__name__}, got {value!r}")


def as_declared(
    parameters: Mapping[str, Any], cls: type, source: str = p.sampling_source(from_tensor=True)
) -> dict[str, Any]:
    """`parameters` with every string given for a scalar field of `cls` cast to its declared type;
    raises `BadRequest` for a key this deployment refuses, a key `cls` does not take, or a string that
    is not of that type. `source` is what the parameters came in, as the message names it."""
    for key, reason in REFUSED.items():
        if key in parameters:
            raise p.BadRequest(f"{source}: {key}: {reason}")
    unknown = sorted(set(parameters) - fields(cls))
    if unknown:
        raise p.BadRequest(
            f"{source}: {', '.join(repr(key) for key in unknown)} "
            f"{'is no field' if len(unknown) == 1 else 'are no fields'} of vLLM's {cls.__name__}"
        )
    scalars = declared_scalars(cls)
    return {
        key: _cast(key, value, scalars[key], source) if isinstance(value, str) and key in scalars else value
        for key, value in parameters.items()
    }


def sampling_params(
    parameters: dict[str, Any],
    info: ClassInfo,
    limits: MediaLimits,
    source: str = p.sampling_source(from_tensor=True),
) -> Any:
    """vLLM `SamplingParams` within the limits: one completion (the responses carry one) of at most
    `max_output_tokens` tokens (vLLM reads `max_tokens: null` as "up to the context length");
    `source` is what the parameters came in (`protocol.sampling_source`), as errors name it."""
    from vllm import SamplingParams
    from vllm.exceptions import VLLMClientError

    parameters = as_declared(parameters, SamplingParams, source)
    extra_args = parameters.get("extra_args")
    if isinstance(extra_args, dict) and EXTRA_ARGS_KEY in extra_args:
        raise p.BadRequest(f"{source}: extra_args.{EXTRA_ARGS_KEY} is the server's (the request's class)")
    if info.supplied:
        parameters["extra_args"] = {**(parameters.get("extra_args") or {}), **info.extra_args()}
    try:
        params = SamplingParams(**parameters)
    except (TypeError, ValueError, OverflowError, VLLMClientError) as error:
        raise p.BadRequest(f"invalid {source}: {error}") from None
    # Checked here because the engine-core process would fail on them, taking every request down.
    if params.extra_args is not None and not isinstance(params.extra_args, dict):
        raise p.BadRequest(f"{source}: extra_args must be an object")
    if params.seed is not None and not SEED_MIN <= params.seed < SEED_END:
        raise p.BadRequest(f"{source}: seed must be in [{SEED_MIN}, {SEED_END})")
    if params.n != 1:
        raise p.BadRequest(f"{source}: n must be 1, got {params.n}")
    if params.max_tokens is None:
        params.max_tokens = limits.max_output_tokens
    elif params.max_tokens > limits.max_output_tokens:
        raise p.BadRequest(
            f"{source}: max_tokens is {params.max_tokens}; the limit is {limits.max_output_tokens}"
        )
    return params
