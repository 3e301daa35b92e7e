"""docs/layout.md's tables name every module of the two packages, module by module, in the package's own
tables: the first table (`rps_serve`) is exactly what the Triton models, the vLLM plug-in, the
deployment's probes and the image build's backend check reach, read from the import graph, and no
module of `rps_serve` imports the harness `rps_harness`."""

from __future__ import annotations

import re

from tests.checkout import CHECKOUT
from tests.deploy.import_graph import file_imports, module_file, needs, package_modules, script_needs

# The Triton models' entry points (each `model.py` imports its model from the package), and what else
# production starts: the plug-in in the engine core, the probes, the image build's backend check.
TRITON_ENTRY_POINTS = sorted(CHECKOUT.glob("model_repository/*/1/model.py"))
PRODUCTION = ("rps_serve.vllm_plugin.scheduler", "rps_serve.probe", "rps_serve.backend_check")


def _tables(package: str) -> list[set[str]]:
    """Per table of the sections titled `## package: ...`, in page order, the modules its first column
    names."""
    text = (CHECKOUT / "docs" / "layout.md").read_text()
    sections = [part for part in text.split("\n## ")[1:] if part.startswith(f"{package}:")]
    assert sections, package
    tables = []
    for section in sections:
        for block in re.split(r"\n\s*\n", section):
            rows = [row for row in block.splitlines() if row.startswith("| `")]
            if rows:
                tables.append(
                    {name for row in rows for name in re.findall(r"`(rps_\w+[\w.]*)`", row.split("|")[1])}
                )
    return tables


def _documented(package: str) -> set[str]:
    return set().union(*_tables(package))


def _production_reach() -> set[str]:
    entry_points = [
        module
        for path in TRITON_ENTRY_POINTS
        for module in script_needs(path).used
        if module.startswith("rps_")
    ]
    reached = needs(*entry_points, *PRODUCTION)
    return {module for module in reached.used | reached.loaded if module.startswith("rps_serve.")}


def test_the_triton_models_have_entry_points() -> None:
    assert len(TRITON_ENTRY_POINTS) >= 2


def test_the_production_table_is_what_production_imports() -> None:
    table, reached = _tables("rps_serve")[0], _production_reach()
    assert not sorted(reached - table), "production imports these, the first table lacks them"
    assert not sorted(table - reached), "the first table names these, production does not import them"


def test_every_module_is_in_its_packages_tables() -> None:
    for package in ("rps_serve", "rps_harness"):
        modules = {module for module in package_modules(package) if module != package}
        documented = _documented(package)
        assert not sorted(modules - documented), f"{package}: modules missing from docs/layout.md"
        assert not sorted(documented - modules), f"{package}: docs/layout.md names modules that do not exist"


def test_the_serving_package_imports_no_harness_module() -> None:
    offending = {}
    for module in package_modules("rps_serve"):
        path = module_file(module)
        assert path is not None, module
        harness = {
            name for name in file_imports(path, module, type_checking=True) if name.startswith("rps_harness")
        }
        if harness:
            offending[module] = sorted(harness)
    assert not offending
