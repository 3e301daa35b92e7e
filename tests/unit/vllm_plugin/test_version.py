"""The plug-in refuses a vLLM release it was not checked against, unless the operator accepts the risk."""

from __future__ import annotations

import logging

import pytest

from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.engine_args import scheduler_engine_kwargs
from rps_serve.vllm_plugin.version import (
    ALLOW_UNTESTED_ENV,
    SUPPORTED_VLLM_VERSIONS,
    UnsupportedVLLMVersion,
    check_vllm_version,
)


@pytest.mark.parametrize("version", SUPPORTED_VLLM_VERSIONS)
def test_supported_release_starts(version: str) -> None:
    check_vllm_version(version, environ={})


@pytest.mark.parametrize("version", ["0.31.0", "0.34.0", "0.33.0rc1", "0.32.0+cpu.dev"])
def test_other_release_refused_naming_supported_ones_and_the_override(version: str) -> None:
    with pytest.raises(UnsupportedVLLMVersion) as refused:
        check_vllm_version(version, environ={})
    message = str(refused.value)
    assert version in message
    assert all(supported in message for supported in SUPPORTED_VLLM_VERSIONS)
    assert ALLOW_UNTESTED_ENV in message


@pytest.mark.parametrize("value", ["", "0", "no", "false"])
def test_override_must_say_yes(value: str) -> None:
    with pytest.raises(UnsupportedVLLMVersion):
        check_vllm_version("0.34.0", environ={ALLOW_UNTESTED_ENV: value})


def test_override_runs_untested_release_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        check_vllm_version("0.34.0", environ={ALLOW_UNTESTED_ENV: "1"})
    assert "0.34.0" in caplog.text and "untested" in caplog.text


def test_engine_arguments_refused_before_an_engine_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    monkeypatch.delenv(ALLOW_UNTESTED_ENV, raising=False)
    with pytest.raises(UnsupportedVLLMVersion):
        scheduler_engine_kwargs(Policy.RPS)
    # Stock vLLM baselines do not run the plug-in: nothing to refuse.
    assert "scheduler_cls" not in scheduler_engine_kwargs(Policy.FCFS)
    monkeypatch.setenv(ALLOW_UNTESTED_ENV, "1")
    assert "scheduler_cls" in scheduler_engine_kwargs(Policy.RPS)
