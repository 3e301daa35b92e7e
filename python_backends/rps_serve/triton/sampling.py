"""`sampling_parameters` as NVIDIA's vllm_backend takes them: scalar values may come as strings.

vllm_backend casts each value to the type vLLM's `SamplingParams` declares for it, and clients built
for it rely on that: GenAI-Perf sends `{"max_tokens": "16"}`. Here a string given for a field declared
int, float or bool (optional or not) is cast the same way; booleans read "true"/"false" and "1"/"0"
(vllm_backend's `bool("false")` would be True). Keys vllm_backend honours that this deployment does
not serve are refused by name, not passed to the engine: structured output (`structured_outputs`, or
vllm_backend's `guided_decoding`) and LoRA adapters (`lora_name`).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from rps_serve.triton import protocol as p

_SCALARS = (bool, int, float)
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


def _cast(name: str, value: str, kind: type) -> Any:
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
    raise p.BadRequest(f"invalid '{p.SAMPLING_PARAMETERS}': {name} must be {kind.__name__}, got {value!r}")


def as_declared(parameters: Mapping[str, Any], cls: type) -> dict[str, Any]:
    """`parameters` with every string given for a scalar field of `cls` cast to its declared type;
    raises `BadRequest` for a key this deployment refuses or a string that is not of that type."""
    for key, reason in REFUSED.items():
        if key in parameters:
            raise p.BadRequest(f"'{p.SAMPLING_PARAMETERS}': {key}: {reason}")
    scalars = declared_scalars(cls)
    return {
        key: _cast(key, value, scalars[key]) if isinstance(value, str) and key in scalars else value
        for key, value in parameters.items()
    }
