"""Nothing that can execute code is loaded at serve time: the model repository, the ONNX Runtime
stand-in and every rps_serve module they import (the RPS scheduler that vLLM's engine core imports
included) load ONNX, JSON and request bytes only. (reliability/test_limits.py checks the served
model's files.)"""

from __future__ import annotations

import ast
from pathlib import Path

from rps_harness.local.server import ONNX_STAND_IN
from tests.checkout import REPOSITORY

PACKAGE_ROOT = Path(__file__).resolve().parents[3] / "python_backends"
ENTRY_POINTS = [*sorted(REPOSITORY.glob("*/1/model.py")), ONNX_STAND_IN]
# Formats and calls that can run code from the data they read.
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
FORBIDDEN_CALLS = {
    ("torch", "load"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("np", "load"),
    ("numpy", "load"),
}
FORBIDDEN_BUILTINS = {"eval", "exec"}
FORBIDDEN_NAMES = {"VLLM_ALLOW_INSECURE_SERIALIZATION", "allow_pickle", "weights_only"}


def _module_file(name: str) -> Path | None:
    base = PACKAGE_ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def serve_time_sources() -> list[Path]:
    """The entry points and the closure of the rps_serve modules they import (parents included)."""
    seen: set[Path] = set()
    todo = list(ENTRY_POINTS)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(ast.parse(path.read_text())):
            parts = name.split(".")
            if parts[0] != "rps_serve":
                continue
            for depth in range(1, len(parts) + 1):
                if (file := _module_file(".".join(parts[:depth]))) is not None:
                    todo.append(file)
    return sorted(seen)


def forbidden_uses(sources: list[Path]) -> list[str]:
    found = []
    for path in sources:
        tree = ast.parse(path.read_text())
        for name in _imports(tree):
            if name.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{path.name}: imports {name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
                    found.append(f"{path.name}:{node.lineno}: {func.id}()")
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and (func.value.id, func.attr) in FORBIDDEN_CALLS
                ):
                    found.append(f"{path.name}:{node.lineno}: {func.value.id}.{func.attr}()")
            if isinstance(node, ast.Name | ast.Constant | ast.keyword):
                text = (
                    node.id
                    if isinstance(node, ast.Name)
                    else node.arg
                    if isinstance(node, ast.keyword)
                    else node.value
                )
                if text in FORBIDDEN_NAMES:
                    found.append(f"{path.name}:{getattr(node, 'lineno', '?')}: {text}")
    return found


def test_serve_time_code_loads_no_pickle() -> None:
    sources = serve_time_sources()
    names = {s.name for s in sources}
    # The closure reaches what runs in the stubs and in vLLM's engine core.
    assert {"vllm_model.py", "preprocess.py", "media.py", "scheduler.py", "runtime.py"} <= names
    assert forbidden_uses(sources) == []


def test_the_check_finds_a_pickle_load(tmp_path: Path) -> None:
    source = tmp_path / "bad.py"
    source.write_text("import pickle\nimport numpy as np\nx = np.load('f', allow_pickle=True)\neval('1')\n")
    assert len(forbidden_uses([source])) == 4
