"""docs/layout.md's tables name every module of the two packages, in the package's own tables: the first
table (`rps_serve`) is exactly what the Triton models, the vLLM plug-in, the deployment's probes and the
image build's backend check reach, read from the import graph, and no module of `rps_serve` imports the
harness `rps_harness`."""

from __future__ import annotations

import re

from tests.checkout import CHECKOUT
from tests.deploy.import_graph import file_imports, module_file, needs, package_modules
from tests.deploy.test_extras import TRITON_MODELS

PRODUCTION = (*TRITON_MODELS, "rps_serve.vllm_plugin.scheduler", "rps_serve.probe", "rps_serve.backend_check")


def _top(module: str) -> str:
    """`package.a` for any module under it."""
    return ".".join(module.split(".")[:2])


def _documented(package: str) -> set[str]:
    """The modules that the sections titled `## package: ...` name in their tables' module column."""
    text = (CHECKOUT / "docs" / "layout.md").read_text()
    sections = [part for part in text.split("\n## ")[1:] if part.startswith(f"{package}:")]
    assert sections, package
    return {
        _top(name)
        for section in sections
        for row in section.splitlines()
        if row.startswith("| ") and "`" in row
        for name in re.findall(r"`(rps_\w+\.[\w.]+)`", row.split("|")[2])
    }


def _parts(package: str) -> set[str]:
    return {_top(module) for module in package_modules(package) if module != package}


def test_the_production_table_is_what_production_imports() -> None:
    reached = {_top(module) for module in needs(*PRODUCTION).used if module != "rps_serve"}
    assert _documented("rps_serve") == reached


def test_every_module_is_in_its_packages_tables() -> None:
    for package in ("rps_serve", "rps_harness"):
        assert _documented(package) == _parts(package), package


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
