"""Class edges (`rps_serve.scheduling.class_edges`): what each class means to the engine, over a fitted
cost model, in the simulator's workloads and in the demo's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rps_harness.loadtest.demo import DEMO_CONTENT
from rps_harness.local.tiny_model import TinyModelSpec, build_tiny_model
from rps_harness.sim.hardware import Execution
from rps_harness.sim.online import trace_features
from rps_harness.sim.run import SimulationConfig, prepare
from rps_harness.workload.content import plan_content
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.shapes import SERVING
from rps_harness.workload.source import SyntheticWorkload
from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel, ModalityClasses
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.cost.training import FittedCostModel, TrainingOptions, fit_cost_model
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.scheduling.class_edges import ClassEdges, EngineClasses, engine_classes
from rps_serve.scheduling.light_steps import LIGHT_STEP_FLOOR, SAND, light_step_budget, sand_edge_tokens
from rps_serve.triton.settings import read_settings

REFERENCES = ("llava-onevision-qwen2-7b", "llava-onevision-qwen2-72b")
REPOSITORY = Path(__file__).resolve().parents[3] / "model_repository"


@pytest.fixture(scope="module")
def fitted() -> FittedCostModel:
    return fit_cost_model(reference_profile(REFERENCES[0], seed=0), TrainingOptions(num_classes=3, seed=0))


def _levels(model: CostModel, requests: list[RequestFeatures]) -> list[int]:
    return [int(level) for level in model.levels(cols.feature_matrix(requests))]


def test_the_edges_of_a_step() -> None:
    edges = ClassEdges.of_step(2048)
    assert edges.rock_tokens == 2048
    assert edges.sand_tokens + LIGHT_STEP_FLOOR * 2048 == 2048  # sand beside the heavier classes' floor


def test_edges_move_sand_over_the_room_and_anything_over_a_step() -> None:
    edges = ClassEdges(sand_tokens=100, rock_tokens=200)
    levels = np.array([0, 0, 0, 1, 1, 2, 2])
    tokens = np.array([100, 101, 201, 150, 201, 50, 300])
    # Sand within the room stays; sand over it is pebbles; over a step, any class is a rock; a rock
    # that k-means drew under a step stays one (the edges only ever make a request heavier).
    assert edges.apply(levels, tokens, num_classes=3).tolist() == [0, 1, 2, 1, 2, 2, 2]
    assert edges.apply(np.array([0, 0]), np.array([150, 250]), num_classes=2).tolist() == [1, 1]


@settings(deadline=None, max_examples=30)  # each example bisects the fitted model: tens of ms
@given(token_budget=st.integers(256, 1 << 15))
def test_sand_fits_in_one_light_step_on_any_step(fitted: FittedCostModel, token_budget: int) -> None:
    """On any engine, the edged model's longest sand text leaves the heavier classes their floor, and no
    sand is longer than the light-step budget (so none raises a light step's cap)."""
    model = engine_classes(fitted, token_budget)
    edge = sand_edge_tokens(model)
    assert edge <= (1 - LIGHT_STEP_FLOOR) * token_budget
    assert edge <= light_step_budget(edge, token_budget)
    longest = RequestFeatures(Modality.TEXT, token_budget + 1, 0)
    assert _levels(model, [longest]) == [model.num_classes - 1]


def test_the_modality_rule_and_an_edged_model_are_left_as_they_are(fitted: FittedCostModel) -> None:
    naive = ModalityClasses()
    assert engine_classes(naive, 2048) is naive
    edged = engine_classes(fitted, 2048)
    assert isinstance(edged, EngineClasses)
    assert engine_classes(edged, 8192) is edged
    assert edged.within_edges(SAND, 4000) == edged.num_classes - 1
    assert fitted.within_edges(SAND, 4000) == SAND  # no engine named, no edges


@pytest.mark.slow
@pytest.mark.parametrize("reference", REFERENCES)
@pytest.mark.parametrize("mix", ["mixed-iii", "cost-vs-modality"])
def test_the_h100_classes_already_hold_the_edges(reference: str, mix: str) -> None:
    """Why the policy table needs no second run: on the simulated H100 deployments (8,192-token steps)
    no request of its workloads changes class at the edges, so the table measures them as they are."""
    gpus = 4 if reference.endswith("72b") else 1
    workload = SyntheticWorkload(mix, 5.0, 3500, 0, shapes=SERVING)
    setup = prepare(SimulationConfig(reference, gpus, workload, execution=Execution.EAGER))
    fitted = fit_cost_model(reference_profile(reference, seed=0), TrainingOptions(num_classes=3, seed=0))
    assert (fitted.levels(trace_features(setup.trace)) == setup.levels).all()


@pytest.mark.slow
def test_the_demo_workload_holds_every_class(tmp_path: Path, trained_repository: Path) -> None:
    """`make demo`'s workload (cost-vs-modality, its five seeds, its media and text limits) holds sand,
    pebbles and rocks in every seed on the engine model.json configures. The cost model here is fitted
    to the reference profile (a test cannot profile this machine); on the CPU stack the edges, not the
    fit, place the pebbles (texts between the room for sand and a step) and the rocks (documents and
    videos, longer than a step), so a profiled fit whose sand reaches the room classes them alike."""
    build_tiny_model(tmp_path, TinyModelSpec())
    served = RequestFormat.of_model(tmp_path)
    settings = read_settings(REPOSITORY / "vllm_model" / "model.json", REPOSITORY)
    token_budget = int(settings.engine_args["max_num_batched_tokens"])
    model = engine_classes(OnnxCostModel.from_repository(trained_repository), token_budget)
    for seed in range(5):
        trace = SyntheticWorkload("cost-vs-modality", 5.0, 120, seed, stratified=True).trace()
        plan = plan_content(trace, served, DEMO_CONTENT)
        served_trace = plan.served_trace(trace)
        requests = [
            RequestFeatures(Modality.from_index(int(m)), int(prompt), int(media))
            for m, prompt, media in zip(
                plan.modality, served_trace.prompt_tokens, served_trace.modality_tokens, strict=True
            )
        ]
        assert set(_levels(model, requests)) == set(range(model.num_classes)), f"seed {seed}"
