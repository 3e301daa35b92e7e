"""No two modules of `rps_serve` import each other, directly or through others, at module level: a
circle makes a module's names depend on which of them was imported first. Imports under
`if TYPE_CHECKING:` count (a circle there is the same design, hidden from the interpreter only);
imports inside functions do not (they run once every module is loaded)."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.import_graph import file_imports, import_cycles, module_graph


def test_no_module_of_the_package_imports_itself_back() -> None:
    cycles = [" -> ".join(cycle) for cycle in import_cycles(module_graph())]
    assert cycles == [], (
        "modules that import each other (move what both need into a module both import):\n"
        + "\n".join(cycles)
    )


def test_a_circle_is_found_through_any_number_of_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_imports_for_type_checking_count_and_those_in_functions_do_not(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    import csv\n"
        "def later() -> None:\n"
        "    import zlib\n"
    )
    assert file_imports(source, in_functions=False, type_checking=True) == {"typing", "json", "csv"}
