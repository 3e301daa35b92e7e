"""What a module of `rps_serve` needs installed: the modules of the package it reaches and the
top-level names of the others it imports, read from the source (nothing is imported).

A reached module's every import counts, inside functions too (its functions may run), except under
`if TYPE_CHECKING:`; a package's `__init__`, imported on the way to one of its modules, counts only
for the imports it runs at import time (and so do the modules those reach).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.checkout import CHECKOUT

SOURCE = CHECKOUT / "python_backends"
PACKAGE = "rps_serve"


def module_file(name: str) -> Path | None:
    path = SOURCE / name.replace(".", "/")
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _nearest_module(name: str) -> str:
    """`rps_serve.a.b` itself, or the module defining `b` where `b` is a name in `rps_serve.a`."""
    while name and module_file(name) is None:
        name = name.rpartition(".")[0]
    return name


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = (module if is_package else module.rpartition(".")[0]).split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names if module_file(f"{base}.{alias.name}"))


def imports(module: str, *, in_functions: bool) -> set[str]:
    """The names `module` imports: at import time only, or `in_functions` too."""
    path = module_file(module)
    assert path is not None, module
    return file_imports(path, module, in_functions=in_functions)


def file_imports(path: Path, module: str = "", *, in_functions: bool = True) -> set[str]:
    """The names the file at `path` (module `module`, for its relative imports) imports."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and not in_functions:
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.update(_imported(child, module, path.name == "__init__.py"))
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


@dataclass
class Needs:
    """The package's modules a start reaches (`used`: every import counts; `loaded`: only at import
    time), each with the module it was first reached from (`via`), and each outside top-level name with
    the first module that imports it."""

    used: set[str] = field(default_factory=set)
    loaded: set[str] = field(default_factory=set)
    via: dict[str, str] = field(default_factory=dict)
    outside: dict[str, str] = field(default_factory=dict)

    def chain(self, name: str) -> str:
        """How an outside name is reached: `name <- module <- ... <- start`."""
        links = [name, self.outside[name]]
        while links[-1] in self.via:
            links.append(self.via[links[-1]])
        return " <- ".join(links)


def needs(*starts: str) -> Needs:
    """What running `starts` (modules of the package, e.g. a command's) may import."""
    result = Needs()
    todo = [(start, True, "") for start in starts]
    while todo:
        module, used, importer = todo.pop()
        module = _nearest_module(module)
        if importer and module not in result.via and module not in starts:
            result.via[module] = importer
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            in_functions = used and name == module
            seen = result.used if in_functions else result.loaded
            if name in seen or (not in_functions and name in result.used):
                continue
            seen.add(name)
            for imported in imports(name, in_functions=in_functions):
                top = imported.partition(".")[0]
                if top == PACKAGE:
                    todo.append((imported, in_functions, name))
                elif top and top not in sys.stdlib_module_names:
                    result.outside.setdefault(top, name)
    return result


def script_needs(path: Path) -> Needs:
    """What running the script at `path` may import: its own imports, and what the package's modules
    among them need."""
    imported = file_imports(path)
    result = needs(*(name for name in imported if name.partition(".")[0] == PACKAGE))
    for name in imported:
        top = name.partition(".")[0]
        if top != PACKAGE and top not in sys.stdlib_module_names:
            result.outside.setdefault(top, str(path.relative_to(CHECKOUT)))
    return result
