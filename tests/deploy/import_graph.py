"""What a module of the project's packages (`rps_serve`, `rps_harness`) needs installed: the modules
of the packages it reaches and the top-level names of the others it imports, read from the source
(nothing is imported).

A reached module's every import counts, inside functions too (its functions may run), except under
`if TYPE_CHECKING:`; a package's `__init__`, imported on the way to one of its modules, counts only
for the imports it runs at import time (and so do the modules those reach).

Also the package's module graph, each module's imports at module level (`module_graph`), and the
circles in it (`import_cycles`).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.checkout import CHECKOUT

SOURCE = CHECKOUT / "python_backends"
PACKAGES = ("rps_serve", "rps_harness")


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


def file_imports(
    path: Path, module: str = "", *, in_functions: bool = True, type_checking: bool = False
) -> set[str]:
    """The names the file at `path` (module `module`, for its relative imports) imports; those under
    `if TYPE_CHECKING:` only if `type_checking`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not type_checking:
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
                if top in PACKAGES:
                    todo.append((imported, in_functions, name))
                elif top and top not in sys.stdlib_module_names:
                    result.outside.setdefault(top, name)
    return result


def script_needs(path: Path) -> Needs:
    """What running the script at `path` may import: its own imports, and what the package's modules
    among them need."""
    imported = file_imports(path)
    result = needs(*(name for name in imported if name.partition(".")[0] in PACKAGES))
    for name in imported:
        top = name.partition(".")[0]
        if top not in PACKAGES and top not in sys.stdlib_module_names:
            result.outside.setdefault(top, str(path.relative_to(CHECKOUT)))
    return result


def package_modules(package: str | None = None) -> list[str]:
    """Every module of `package` (default: both), packages (their `__init__`) included."""
    names = []
    packages = (package,) if package else PACKAGES
    for path in sorted(path for name in packages for path in (SOURCE / name).rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def module_graph() -> dict[str, set[str]]:
    """Per module of the package, the package's modules its module-level imports load, those under
    `if TYPE_CHECKING:` too (a circle a type checker follows is still a circle): each imported module
    and the packages above it that the importer is not inside (those are loaded before it runs)."""
    graph = {}
    for module in package_modules():
        path = module_file(module)
        assert path is not None, module
        own = {".".join(module.split(".")[:depth]) for depth in range(1, module.count(".") + 2)}
        loaded: set[str] = set()
        for name in file_imports(path, module, in_functions=False, type_checking=True):
            if name.partition(".")[0] not in PACKAGES:
                continue
            parts = _nearest_module(name).split(".")
            loaded.update(".".join(parts[:depth]) for depth in range(2, len(parts) + 1))
        graph[module] = loaded - own
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of `graph`: each set of modules that import one another, directly or through the
    others (a strongly connected component of two or more), as a path that closes on its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_closed_path(graph, set(component)) for component in components]


def _closed_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path through `component` from its first module (by name) back to it, by the shortest way."""
    start = min(component)
    previous: dict[str, str] = {}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if target not in previous:
                previous[target] = node
                todo.append(target)
    raise AssertionError(f"{sorted(component)} is not a circle")
