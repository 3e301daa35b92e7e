"""`sampling_parameters` as vllm_backend takes them, against vLLM's own `SamplingParams`."""

from __future__ import annotations

import pytest
from vllm import SamplingParams

from rps_serve.triton.protocol import REQUEST_PARAMETERS as REQUEST
from rps_serve.triton.protocol import BadRequest
from rps_serve.triton.sampling import REFUSED, as_declared, declared_scalars


def test_strings_become_the_declared_scalars() -> None:
    given = {"max_tokens": "16", "temperature": " 0.5", "ignore_eos": "TRUE", "seed": "7", "stop": "12"}
    cast = as_declared(given, SamplingParams)
    assert cast == {"max_tokens": 16, "temperature": 0.5, "ignore_eos": True, "seed": 7, "stop": "12"}
    params = SamplingParams(**cast)
    assert (params.max_tokens, params.temperature, params.ignore_eos, params.seed) == (16, 0.5, True, 7)
    assert as_declared({"skip_special_tokens": "0"}, SamplingParams) == {"skip_special_tokens": False}


def test_values_of_their_own_type_pass_untouched() -> None:
    given = {"max_tokens": 4, "top_p": 0.9, "ignore_eos": False, "extra_args": {"k": "1"}}
    assert as_declared(given, SamplingParams) == given


def test_the_scalars_are_read_from_vllms_declarations() -> None:
    scalars = declared_scalars(SamplingParams)
    assert (scalars["max_tokens"], scalars["top_k"], scalars["top_p"], scalars["ignore_eos"]) == (
        int,
        int,
        float,
        bool,
    )
    assert "stop" not in scalars and "extra_args" not in scalars


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"max_tokens": "16.5"}, "max_tokens"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
        ({"top_p": "x"}, "top_p"),
    ],
)
def test_a_string_of_another_type_is_refused_by_name(given: dict[str, str], named: str) -> None:
    with pytest.raises(BadRequest, match=named):
        as_declared(given, SamplingParams)


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_what_this_deployment_does_not_serve_is_refused_by_name(key: str) -> None:
    with pytest.raises(BadRequest, match=key):
        as_declared({key: {"json": {}}}, SamplingParams)


def test_keys_that_are_no_sampling_parameter_are_refused_each_named_with_their_source() -> None:
    with pytest.raises(BadRequest, match=r"^request parameters: 'colour', 'stream' are no fields of"):
        as_declared({"colour": "red", "temperature": "0", "stream": "false"}, SamplingParams, REQUEST)
    with pytest.raises(BadRequest, match=r"^'sampling_parameters': 'colour' is no field of vLLM's"):
        as_declared({"colour": "red"}, SamplingParams)
    with pytest.raises(BadRequest, match=r"^invalid request parameters: max_tokens must be int"):
        as_declared({"max_tokens": "many"}, SamplingParams, REQUEST)
