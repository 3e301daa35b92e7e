"""docs/layout.md's first table names what runs in production: exactly the package's modules that the
Triton models, the vLLM plug-in and the deployment's probes reach, read from the import graph."""

from __future__ import annotations

import re

from tests.checkout import CHECKOUT
from tests.deploy.import_graph import needs
from tests.deploy.test_extras import TRITON_MODELS

PRODUCTION = (*TRITON_MODELS, "rps_serve.vllm_plugin.scheduler", "rps_serve.probe")
SECTION = "## Runs in production"


def _top(module: str) -> str:
    """`rps_serve.a` for any module under it."""
    return ".".join(module.split(".")[:2])


def _documented() -> set[str]:
    text = (CHECKOUT / "docs" / "layout.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    modules = {
        _top(name)
        for row in section.splitlines()
        if row.startswith("| ") and "`" in row
        for name in re.findall(r"`(rps_serve\.[\w.]+)`", row.split("|")[2])
    }
    return modules


def test_the_production_table_is_what_production_imports() -> None:
    reached = {_top(module) for module in needs(*PRODUCTION).used if module != "rps_serve"}
    assert _documented() == reached
