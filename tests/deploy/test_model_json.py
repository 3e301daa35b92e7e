"""Every model.json (the repository's default and the GPU configurations under docker/configs) is read
by the serving code and its engine arguments are accepted by vLLM's own engine-argument parser."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from rps_serve.profiles.reference import reference_model, reference_model_names
from rps_serve.scheduling.parameters import Policy
from rps_serve.triton.settings import POLICY_ENV, SETTINGS_FILE, read_settings
from tests.checkout import CHECKOUT, REPOSITORY

DOCKER_CONFIGS = CHECKOUT / "docker" / "configs"
GPU_CONFIGS = sorted(DOCKER_CONFIGS.glob("*/model.json"))
ALL_SETTINGS = [REPOSITORY / SETTINGS_FILE, *GPU_CONFIGS]


class EngineArgsParser:
    """vLLM's `AsyncEngineArgs` CLI parser, fed the engine keyword arguments as `vllm serve` flags."""

    def __init__(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        self.engine_args = AsyncEngineArgs
        self.fields = {f.name for f in fields(AsyncEngineArgs)}
        self.parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser(exit_on_error=False))

    def _tokens(self, kwargs: dict[str, Any]) -> list[str]:
        tokens = []
        for key, value in kwargs.items():
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                negative = "--no-" + flag[2:]
                # store_true flags have no negative form; their default is False.
                if value or negative in self.parser._option_string_actions:
                    tokens.append(flag if value else negative)
            elif isinstance(value, dict | list):
                tokens += [flag, json.dumps(value)]
            else:
                tokens += [flag, str(value)]
        return tokens

    def parse(self, kwargs: dict[str, Any]) -> Any:
        """`AsyncEngineArgs` as vLLM parses `kwargs`; ValueError or argparse.ArgumentError if it would not."""
        unknown = set(kwargs) - self.fields
        if unknown:
            raise ValueError(f"unknown engine arguments {sorted(unknown)}")
        args = self.engine_args.from_cli_args(self.parser.parse_args(self._tokens(kwargs)))
        changed = {k: getattr(args, k) for k, v in kwargs.items() if getattr(args, k) != v}
        if changed:
            raise ValueError(f"vLLM read these engine arguments differently: {changed}")
        return args


@pytest.fixture(scope="module")
def vllm_parser() -> EngineArgsParser:
    return EngineArgsParser()


def _engine_kwargs(settings_file: Path, environ: dict[str, str] | None = None) -> dict[str, Any]:
    return read_settings(settings_file, REPOSITORY, environ or {}).engine_kwargs()


@pytest.mark.parametrize("path", ALL_SETTINGS, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("policy", [Policy.RPS, Policy.FCFS], ids=lambda p: p.value)
def test_vllm_accepts_every_model_json(
    vllm_parser: EngineArgsParser, path: Path, policy: Policy, tmp_path: Path
) -> None:
    kwargs = _engine_kwargs(path, {POLICY_ENV: policy.value})
    # The weights are not here, and offline vLLM would resolve a missing local path as a hub id.
    args = vllm_parser.parse({**kwargs, "model": str(tmp_path)})
    assert args.scheduling_policy == ("fcfs" if policy is Policy.FCFS else "priority")
    assert args.disable_log_stats is False


def test_gpu_configs_are_the_paper_models_on_their_profiled_gpus() -> None:
    names = [path.parent.name for path in GPU_CONFIGS]
    assert {"llava-onevision-qwen2-7b", "llava-onevision-qwen2-72b"} <= set(names)
    assert len(names) >= 3
    for path in GPU_CONFIGS:
        name = path.parent.name
        assert name in reference_model_names()  # the image trains its cost models on this profile
        settings = read_settings(path, REPOSITORY, {})
        assert settings.engine_args["tensor_parallel_size"] == reference_model(name).gpus
        assert settings.model.is_absolute() and settings.model.parent == Path("/models")
        assert settings.cost_model == REPOSITORY  # the ONNX files the ensemble serves


@pytest.mark.parametrize("path", GPU_CONFIGS, ids=lambda p: p.parent.name)
def test_gpu_configs_run_the_async_scheduler(path: Path) -> None:
    kwargs = _engine_kwargs(path)
    assert kwargs["async_scheduling"] is True
    assert kwargs["scheduler_cls"].endswith(".RPSAsyncScheduler")
    # The CPU default keeps async scheduling off, where the CPU platform forces it off anyway.
    assert _engine_kwargs(REPOSITORY / SETTINGS_FILE)["scheduler_cls"].endswith(".RPSScheduler")


def test_the_image_configs_refit_their_cost_model_and_the_cpu_demo_does_not() -> None:
    # The image starts from the H100 reference fit, not the served model's: it learns its model online.
    for path in GPU_CONFIGS:
        assert read_settings(path, REPOSITORY, {}).cost_model_online.enabled, path.parent.name
    # The CPU demo's paired runs must class alike: its fit stays the profile-trained one.
    assert not read_settings(REPOSITORY / SETTINGS_FILE, REPOSITORY, {}).cost_model_online.enabled


@pytest.mark.parametrize("setting", [False, True])
def test_an_operator_turns_the_online_refit_off_with_false(tmp_path: Path, setting: bool) -> None:
    # An image config with `"cost_model_online": false` mounted over it (docs/deploy.md).
    changed = _broken(tmp_path, {"cost_model_online": setting})
    assert read_settings(changed, REPOSITORY, {}).cost_model_online.enabled is setting


def _broken(tmp_path: Path, change: dict[str, Any]) -> Path:
    raw = json.loads(GPU_CONFIGS[0].read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            raw[key] = {**raw.get(key, {}), **value}
        else:
            raw[key] = value
    path = tmp_path / "model.json"
    path.write_text(json.dumps(raw))
    return path


def test_an_unknown_engine_argument_is_rejected(vllm_parser: EngineArgsParser, tmp_path: Path) -> None:
    kwargs = _engine_kwargs(_broken(tmp_path, {"engine_args": {"tensor_paralel_size": 4}}))
    with pytest.raises(ValueError, match="tensor_paralel_size"):
        vllm_parser.parse(kwargs)


@pytest.mark.parametrize(
    ("engine_args", "message"),
    [
        ({"tensor_parallel_size": "four"}, "invalid int value"),
        ({"dtype": "bf16"}, "invalid choice"),
        ({"gpu_memory_utilization": "most"}, "invalid float value"),
    ],
)
def test_a_badly_typed_engine_argument_is_rejected(
    vllm_parser: EngineArgsParser, tmp_path: Path, engine_args: dict[str, Any], message: str
) -> None:
    import argparse

    kwargs = _engine_kwargs(_broken(tmp_path, {"engine_args": engine_args}))
    with pytest.raises(argparse.ArgumentError, match=message):
        vllm_parser.parse(kwargs)


def test_unknown_settings_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="engine_arg"):
        read_settings(_broken(tmp_path, {"engine_arg": {}}), REPOSITORY, {})
    with pytest.raises(ValueError, match="video_frame"):
        read_settings(_broken(tmp_path, {"media": {"video_frame": 8}}), REPOSITORY, {})
    with pytest.raises(TypeError, match="chunk_cap"):
        _engine_kwargs(_broken(tmp_path, {"rps": {"chunk_cap": 512}}))
