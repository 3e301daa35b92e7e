"""A checkout's layout, relative to its root (where `make` and the commands run): the model repository,
the tiny model its model.json names by default ("../build/tiny-qwen2-vl") and the profiles taken of it.
Outside a checkout, pass `--repository` and `--model`."""

from pathlib import Path

REPOSITORY = Path("model_repository")
TINY_MODEL = Path("build") / "tiny-qwen2-vl"
PROFILES = Path("build") / "profile"
# NVIDIA GenAI-Perf's own venv (`make setup-genai-perf`).
GENAI_PERF_VENV = Path("build") / "venv-genai-perf"
