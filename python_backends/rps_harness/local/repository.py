"""Build outputs the model repository needs before a server can start: the ONNX cost models (the
served model's profile, trained on) and the tiny model that model.json points to by default; and the
repository's copies the comparisons serve from (online refits, an engine per policy)."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from rps_harness.local.checkout import PROFILES, REPOSITORY, TINY_MODEL
from rps_harness.local.tiny_model import TinyModelSpec, build_tiny_model
from rps_harness.sim.simulator import served_settings
from rps_harness.workload.synthetic_profile import reference_profile
from rps_harness.workload_profiler.isolated import profile_served_model
from rps_serve.cost.runtime import CLASSIFIER_MODEL, ESTIMATOR_MODEL, REPORT_FILE, onnx_path, profile_source
from rps_serve.cost.training import TrainingOptions, train_cost_model
from rps_serve.profiles.records import read_records
from rps_serve.profiles.reference import DEFAULT_REFERENCE
from rps_serve.triton import protocol as p
from rps_serve.triton.settings import SETTINGS_FILE, SETTINGS_NAME, read_settings

logger = logging.getLogger(__name__)

PROFILE_REPEATS = 2  # runs of every planned request, as `make model-repository` profiles


def cost_models_present(repository: Path) -> bool:
    return all(onnx_path(repository, name).is_file() for name in (ESTIMATOR_MODEL, CLASSIFIER_MODEL))


def ensure_cost_models(repository: Path, model: Path, profiles: Path = PROFILES) -> str | None:
    """The one recipe for a repository's cost models, as `make model-repository` follows it: unless
    both ONNX files are there, profile `model` as the repository serves it (isolated runs on its
    engine, kept as `profiles/<model>.jsonl`, a partial one resumed) and train on that. What they
    were trained on, if trained."""
    if cost_models_present(repository):
        return None
    profile = profiles / f"{model.name}.jsonl"
    logger.info("profiling %s into %s, then training the cost models into %s", model, profile, repository)
    served = read_settings(repository / SETTINGS_FILE, repository)
    run = profile_served_model(model, served.engine_args, profile, repeats=PROFILE_REPEATS)
    logger.info("profiled %s: %s", model.name, run.describe())
    source = profile_source(profile)
    train_cost_model(list(read_records(profile)), repository, TrainingOptions(), source)
    return source


def train_reference_cost_models(repository: Path, profile: str = DEFAULT_REFERENCE) -> None:
    """Cost models fitted to a published H100 reference, for servers whose classes must not depend
    on this machine's speed (the tests') and for the GPU image before it profiles its model."""
    train_cost_model(
        reference_profile(profile), repository, TrainingOptions(), f"reference profile {profile}"
    )


def ensure_tiny_model(path: Path, spec: TinyModelSpec | None = None) -> bool:
    """Build the tiny Qwen2-VL at `path` unless one is there; True if built."""
    if (path / "config.json").is_file():
        return False
    logger.info("building the tiny Qwen2-VL into %s", path)
    build_tiny_model(path, spec or TinyModelSpec())
    return True


def ready_to_serve(
    repository: Path, model: Path | None = None, report: Callable[[str], None] = logger.info
) -> Path:
    """The model a server on `repository` runs, made ready, as `rps-serve serve` does: `model`, else
    model.json's, which names the tiny model as it ships (built first, without `model`, if missing),
    and the repository's cost models made for it if missing (`ensure_cost_models`); `report` hears of
    what was built."""
    if model is None and ensure_tiny_model(TINY_MODEL):
        report(f"built the tiny model into {TINY_MODEL}")
    served = model or read_settings(repository / SETTINGS_FILE, repository).model
    if source := ensure_cost_models(repository, served):
        report(f"trained the cost models into {repository} on {source}")
    return served


def online_refit_copy(work: Path, interval_s: float) -> Path:
    """A fresh copy of the checkout's repository at `work`/model_repository, without its cost models
    (the caller trains the start it wants), whose `vllm_model` refits them online every `interval_s`."""
    repository = work / "model_repository"
    shutil.rmtree(repository, ignore_errors=True)
    shutil.copytree(REPOSITORY, repository, ignore=shutil.ignore_patterns("*.onnx", REPORT_FILE))
    settings_file = repository / SETTINGS_FILE
    settings = json.loads(settings_file.read_text())
    settings["cost_model_online"] = {"interval_s": interval_s}
    settings_file.write_text(json.dumps(settings, indent=1))
    return repository


# The models in front of the engine, which every policy's ensemble shares.
FRONT_MODELS = ("preprocess", ESTIMATOR_MODEL, CLASSIFIER_MODEL)


def engine_model(policy: str) -> str:
    """The engine model serving `policy` in a `policy_repository`."""
    return f"{p.VLLM_MODEL}-{policy}"


def ensemble_model(policy: str) -> str:
    """The ensemble in front of `engine_model(policy)` in a `policy_repository`."""
    return f"{p.ENSEMBLE}-{policy}"


def policy_repository(work: Path, policies: Sequence[str], repository: Path = REPOSITORY) -> Path:
    """A copy of `repository` at `work`/model_repository with an engine per policy: `vllm_model` as
    `engine_model(policy)`, its model.json's policy (and a variant's `rps` settings: `served_settings`)
    set, behind its own ensemble `ensemble_model(policy)`, the front models shared. One server then
    holds every policy of a comparison, which switches policy without a server start; an idle vLLM
    engine does not spin, so the one serving takes the engine's core alone. Serve it with
    `policy_models(policies)` loaded (Triton's explicit model control): the copy's own `vllm_model`
    and `rps_ensemble` stay on disk, unloaded, for `preprocess` to read its settings."""
    copy = work / "model_repository"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(repository, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for policy in policies:
        engine, ensemble = copy / engine_model(policy), copy / ensemble_model(policy)
        shutil.copytree(copy / p.VLLM_MODEL, engine)
        _rename(engine / "config.pbtxt", {f'name: "{p.VLLM_MODEL}"': f'name: "{engine.name}"'})
        settings = json.loads((engine / SETTINGS_NAME).read_text())
        served, scheduler = served_settings(policy)
        settings["policy"] = served.value
        settings["rps"] = {**settings.get("rps", {}), **scheduler}
        (engine / SETTINGS_NAME).write_text(json.dumps(settings, indent=1) + "\n")
        shutil.copytree(copy / p.ENSEMBLE, ensemble)
        _rename(
            ensemble / "config.pbtxt",
            {
                f'name: "{p.ENSEMBLE}"': f'name: "{ensemble.name}"',
                f'model_name: "{p.VLLM_MODEL}"': f'model_name: "{engine.name}"',
            },
        )
    return copy


def policy_models(policies: Sequence[str]) -> list[str]:
    """The models a server on a `policy_repository` loads: the front models, each policy's engine and
    ensemble."""
    return [*FRONT_MODELS, *map(engine_model, policies), *map(ensemble_model, policies)]


def _rename(config: Path, names: dict[str, str]) -> None:
    """Replace each of `names`' lines in a config.pbtxt, each exactly once (a repository whose configs
    read otherwise is not the one this copies)."""
    text = config.read_text()
    for old, new in names.items():
        if text.count(old) != 1:
            raise ValueError(f"{config}: expected {old!r} once, found it {text.count(old)} times")
        text = text.replace(old, new)
    config.write_text(text)
