"""Every backend a model repository names has an implementation in the server's backend directory:
`python3 -m rps_serve.backend_check REPOSITORY --backend-directory DIR`.

Triton resolves a model's backend when it loads the model, so a container that lacks one starts,
then fails that model with "unable to find backend library" (NVIDIA's specialised containers, the
vLLM one among them, carry only their own backend and the Python backend). The image build runs this
check, so a missing backend fails `docker build`, not the first start.

A model's backend is its `backend` field, or the one its `platform` field stands for (Triton's
table: `onnxruntime_onnx` is served by the `onnxruntime` backend; an `ensemble` needs none). Triton
finds a backend as `<backend>/libtriton_<backend>.so` in the backend directory (a copy inside the
model's directory takes precedence), or as a Python-based backend, `<backend>/model.py`, which runs
on the Python backend, so that one must be present too.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Triton's platforms and the backend that serves each (the server's model-configuration docs).
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
    "pytorch_libtorch": "pytorch",
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
}
# Served by the server itself, with no backend library.
BUILT_IN_PLATFORMS = frozenset({"ensemble"})
PYTHON = "python"

# A top-level `backend: "..."` or `platform: "..."` line of a config.pbtxt (nested messages indent).
_FIELD = re.compile(r'^(backend|platform)\s*:\s*"([^"]*)"', re.MULTILINE)


@dataclass(frozen=True)
class ModelBackend:
    """The backend one model of a repository needs (`None`: served by the server itself)."""

    model: str
    backend: str | None
    named_by: str  # "backend: ..." or "platform: ..." as config.pbtxt says it


def model_backend(model_dir: Path) -> ModelBackend:
    """The backend `model_dir/config.pbtxt` names, directly or through its platform."""
    fields = dict(_FIELD.findall((model_dir / "config.pbtxt").read_text()))
    if "backend" in fields:
        return ModelBackend(model_dir.name, fields["backend"], f'backend: "{fields["backend"]}"')
    platform = fields.get("platform")
    if platform is None:
        raise ValueError(f"{model_dir / 'config.pbtxt'} names neither a backend nor a platform")
    named_by = f'platform: "{platform}"'
    if platform in BUILT_IN_PLATFORMS:
        return ModelBackend(model_dir.name, None, named_by)
    if platform not in PLATFORM_BACKENDS:
        raise ValueError(f"{model_dir / 'config.pbtxt'}: unknown platform {platform!r}")
    return ModelBackend(model_dir.name, PLATFORM_BACKENDS[platform], named_by)


def repository_backends(repository: Path) -> list[ModelBackend]:
    """Every model of the repository (a folder holding a config.pbtxt) with the backend it needs."""
    return [model_backend(config.parent) for config in sorted(repository.glob("*/config.pbtxt"))]


def _implemented(backend: str, backend_directory: Path, model_dir: Path) -> bool:
    library = f"libtriton_{backend}.so"
    copies = [model_dir / library, *model_dir.glob(f"*/{library}"), backend_directory / backend / library]
    if any(path.is_file() for path in copies):
        return True
    python_based = (backend_directory / backend / "model.py").is_file()
    return python_based and (backend_directory / PYTHON / f"libtriton_{PYTHON}.so").is_file()


def missing_backends(repository: Path, backend_directory: Path) -> list[str]:
    """One line per model whose backend has no implementation: what it names and what was looked for."""
    return [
        f"model {need.model!r} ({need.named_by}) needs backend {need.backend!r}: no "
        f"{backend_directory / need.backend / f'libtriton_{need.backend}.so'} and no Python-based "
        f"{backend_directory / need.backend / 'model.py'} (with the python backend)"
        for need in repository_backends(repository)
        if need.backend and not _implemented(need.backend, backend_directory, repository / need.model)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path, help="the model repository")
    parser.add_argument(
        "--backend-directory",
        type=Path,
        default=Path("/opt/tritonserver/backends"),
        help="tritonserver's --backend-directory (default: the NVIDIA containers')",
    )
    args = parser.parse_args(argv)
    needs = repository_backends(args.repository)
    if not needs:
        print(f"{args.repository} holds no model (no */config.pbtxt)", file=sys.stderr)
        return 1
    missing = missing_backends(args.repository, args.backend_directory)
    for line in missing:
        print(line, file=sys.stderr)
    if not missing:
        named = sorted({need.backend for need in needs if need.backend})
        print(f"{len(needs)} models, every backend present in {args.backend_directory}: {', '.join(named)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
