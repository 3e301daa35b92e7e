"""Every config.pbtxt of the model repository is a valid Triton model config, and the ensemble's
wiring (tensor names, data types, shapes) matches the configs of its steps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.checkout import REPOSITORY

CONFIGS = sorted(REPOSITORY.glob("*/config.pbtxt"))
ENSEMBLE = "rps_ensemble"


def parse_config(text: str) -> mc.ModelConfig:
    """Triton's own protobuf schema: an unknown field or a wrong value type is an error."""
    return text_format.Parse(text, mc.ModelConfig())


def load_repository(root: Path) -> dict[str, mc.ModelConfig]:
    return {path.parent.name: parse_config(path.read_text()) for path in sorted(root.glob("*/config.pbtxt"))}


@dataclass(frozen=True)
class Tensor:
    data_type: int
    dims: tuple[int, ...]

    def fits(self, other: Tensor) -> bool:
        """Same type, same rank, and every dimension equal or variable (-1) on either side."""
        return (
            self.data_type == other.data_type
            and len(self.dims) == len(other.dims)
            and all(a == b or -1 in (a, b) for a, b in zip(self.dims, other.dims, strict=True))
        )

    def __str__(self) -> str:
        return f"{mc.DataType.Name(self.data_type)} {list(self.dims)}"


def _tensors(specs: object) -> dict[str, Tensor]:
    return {t.name: Tensor(t.data_type, tuple(t.dims)) for t in specs}  # type: ignore[attr-defined]


def ensemble_errors(configs: dict[str, mc.ModelConfig], ensemble: str) -> list[str]:
    """What Triton would refuse (or fail on at run time) in `ensemble`'s steps, one line each."""
    config = configs[ensemble]
    errors: list[str] = []
    available = _tensors(config.input)  # tensor name in the ensemble -> what it holds
    for step in config.ensemble_scheduling.step:
        if step.model_name not in configs:
            errors.append(f"step {step.model_name}: no such model in the repository")
            continue
        inputs, outputs = _tensors(configs[step.model_name].input), _tensors(configs[step.model_name].output)
        for key, value in step.input_map.items():
            if key not in inputs:
                errors.append(f"{step.model_name} has no input {key!r}")
            elif value not in available:
                errors.append(f"{step.model_name}.{key} reads {value!r}, which no earlier step produces")
            elif not available[value].fits(inputs[key]):
                errors.append(
                    f"{step.model_name}.{key} is {inputs[key]}, but {value!r} is {available[value]}"
                )
        required = {i.name for i in configs[step.model_name].input if not i.optional}
        errors += [
            f"{step.model_name}: required input {name!r} unmapped" for name in required - set(step.input_map)
        ]
        for key, value in step.output_map.items():
            if key not in outputs:
                errors.append(f"{step.model_name} has no output {key!r}")
            elif value in available:
                errors.append(f"{value!r} is written twice ({step.model_name}.{key})")
            else:
                available[value] = outputs[key]
    for name, tensor in _tensors(config.output).items():
        if name not in available:
            errors.append(f"ensemble output {name!r} is produced by no step")
        elif not available[name].fits(tensor):
            errors.append(f"ensemble output {name!r} is {tensor}, but its step gives {available[name]}")
    return errors


# NVIDIA vllm_backend's tensors (src/model.py, `_auto_complete_inputs_and_outputs`) as it declares them
VLLM_BACKEND_INPUTS = {
    "text_input": Tensor(mc.TYPE_STRING, (1,)),
    "image": Tensor(mc.TYPE_STRING, (-1,)),
    "stream": Tensor(mc.TYPE_BOOL, (1,)),
    "sampling_parameters": Tensor(mc.TYPE_STRING, (1,)),
    "exclude_input_in_output": Tensor(mc.TYPE_BOOL, (1,)),
    "return_finish_reason": Tensor(mc.TYPE_BOOL, (1,)),
    "return_cumulative_logprob": Tensor(mc.TYPE_BOOL, (1,)),
    "return_logprobs": Tensor(mc.TYPE_BOOL, (1,)),
    "return_num_input_tokens": Tensor(mc.TYPE_BOOL, (1,)),
    "return_num_output_tokens": Tensor(mc.TYPE_BOOL, (1,)),
    "embedding_request": Tensor(mc.TYPE_STRING, (1,)),
}
VLLM_BACKEND_OUTPUTS = {
    "text_output": Tensor(mc.TYPE_STRING, (-1,)),
    "finish_reason": Tensor(mc.TYPE_STRING, (-1,)),
    "cumulative_logprob": Tensor(mc.TYPE_FP32, (-1,)),
    "logprobs": Tensor(mc.TYPE_STRING, (-1,)),
    "num_input_tokens": Tensor(mc.TYPE_UINT32, (1,)),
    "num_output_tokens": Tensor(mc.TYPE_UINT32, (-1,)),
}


def test_the_repository_has_its_five_models() -> None:
    names = {path.parent.name for path in CONFIGS}
    assert names == {"preprocess", "impact_estimator", "request_classifier", "vllm_model", ENSEMBLE}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.parent.name)
def test_every_config_parses_as_a_triton_model_config(path: Path) -> None:
    config = parse_config(path.read_text())
    assert config.name == path.parent.name  # Triton refuses a name that differs from the directory
    assert config.input and config.output  # the real ONNX backend and the ensemble need them listed
    if config.platform != "ensemble":
        assert config.instance_group


def test_an_invalid_config_is_rejected() -> None:
    text = (REPOSITORY / "impact_estimator" / "config.pbtxt").read_text()
    with pytest.raises(text_format.ParseError, match="max_batch_sise"):
        parse_config(text.replace("max_batch_size", "max_batch_sise"))
    with pytest.raises(text_format.ParseError, match="TYPE_FP23"):
        parse_config(text.replace("TYPE_FP32", "TYPE_FP23", 1))


def test_the_ensemble_matches_its_steps() -> None:
    assert ensemble_errors(load_repository(REPOSITORY), ENSEMBLE) == []


def test_the_ensemble_check_finds_broken_wiring() -> None:
    configs = load_repository(REPOSITORY)
    classifier = configs["request_classifier"]
    next(o for o in classifier.output if o.name == "class_level").data_type = mc.TYPE_INT32
    estimator_step = configs[ENSEMBLE].ensemble_scheduling.step[1]
    estimator_step.output_map["cost"] = "_costs"  # the classifier and vllm_model still read "_cost"
    preprocess = configs["preprocess"]
    next(o for o in preprocess.output if o.name == "features").dims[:] = [1, 2, 3]
    errors = ensemble_errors(configs, ENSEMBLE)
    assert any("vllm_model.rps_class_level is TYPE_INT64" in e and "TYPE_INT32" in e for e in errors)
    assert any("request_classifier.cost reads '_cost'" in e for e in errors)
    assert any("vllm_model.rps_cost reads '_cost'" in e for e in errors)
    assert any("impact_estimator.features" in e and "[1, 2, 3]" in e for e in errors)
    assert any("vllm_model.rps_features" in e and "[1, 2, 3]" in e for e in errors)
    assert len(errors) == 5


@pytest.mark.parametrize("model", [ENSEMBLE, "vllm_model"])
def test_clients_of_vllm_backend_find_its_tensors(model: str) -> None:
    """Each of vllm_backend's inputs and outputs, declared as there (each handled or refused by name:
    docs/triton.md); its inputs optional but the prompt."""
    config = load_repository(REPOSITORY)[model]
    inputs, outputs = _tensors(config.input), _tensors(config.output)
    assert {name: inputs.get(name) for name in VLLM_BACKEND_INPUTS} == VLLM_BACKEND_INPUTS
    assert {name: outputs.get(name) for name in VLLM_BACKEND_OUTPUTS} == VLLM_BACKEND_OUTPUTS
    required = {i.name for i in config.input if i.name in VLLM_BACKEND_INPUTS and not i.optional}
    assert required <= {"text_input"}
