"""The names clients and the orchestrator's probes address: the repository's models, `vllm_model`'s
settings file and its health side request. Standard library only, so that a probe (a fresh Python
process every few seconds, `rps_serve.probe`) starts in tens of milliseconds (44 ms here, against
80 ms with numpy, which `protocol` needs) and reads few files. `protocol` re-exports them beside the
tensor names.
"""

from __future__ import annotations

from pathlib import Path

# The repository's models that clients call
ENSEMBLE = "rps_ensemble"
VLLM_MODEL = "vllm_model"
SETTINGS_NAME = "model.json"  # an engine model's settings, in its directory of the repository
SETTINGS_FILE = Path(VLLM_MODEL) / SETTINGS_NAME

# A vllm_model request carrying `rps_health` (BOOL [1]) is answered at once, whatever the load, with
# `rps_engine_state` (BYTES [1]): the engine's state (`engine_supervisor.EngineState`: serving,
# restarting, overdue, failed); it generates nothing. The orchestrator's probes ask it (`rps_serve.probe`).
HEALTH = "rps_health"
ENGINE_STATE = "rps_engine_state"
