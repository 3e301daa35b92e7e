"""pytest plug-in: run vLLM's own V1 scheduler tests offline, against the RPS scheduler or vLLM's.

Load it with `-p vllm_upstream.plugin` (this package's parent folder on `sys.path`) and `--noconftest`
(vLLM's root conftest needs its whole test-requirements set; the two fixtures the scheduler tests use
from it are defined here). It

1. when imported, writes a fake Hugging Face hub cache (`fake_hub`; `RPS_UPSTREAM_HUB` names its folder)
   and points the hub clients at it, offline, before anything imports `huggingface_hub`;
2. with `--rps-scheduler=rps` (the default; `RPS_UPSTREAM_SCHEDULER` sets it too), replaces vLLM's
   `Scheduler` / `AsyncScheduler` in the collected test modules' globals (and in their helpers', such as
   `tests/v1/core/utils.py`'s `create_scheduler`) with `RPSScheduler` / `RPSAsyncScheduler`;
   `--rps-scheduler=stock` leaves vLLM's, to tell the offline set-up's failures from RPS's;
3. marks the failures listed in `expected` for the installed vLLM release as `xfail(strict=True)`,
   each with its reason, so that a test that starts passing (or a new failure) shows up.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from vllm_upstream.expected import Expectation, UnknownVersionError, expectations_for

SCHEDULER_OPTION = "--rps-scheduler"
SCHEDULER_ENV = "RPS_UPSTREAM_SCHEDULER"
HUB_ENV = "RPS_UPSTREAM_HUB"
XFAIL_ENV = "RPS_UPSTREAM_XFAIL"
DEFAULT_HUB = Path(__file__).resolve().parents[2] / "build" / "vllm-upstream" / "hub"

# vLLM's own markers (its pyproject.toml), so that --strict-markers from another ini does not trip.
VLLM_MARKERS = (
    "slow_test",
    "skip_global_cleanup",
    "core_model",
    "hybrid_model",
    "cpu_model",
    "cpu_test",
    "split",
    "distributed",
    "optional",
)

_swapped: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rps-upstream", "vLLM's scheduler tests against RPS")
    group.addoption(
        SCHEDULER_OPTION,
        choices=("rps", "stock"),
        default=os.environ.get(SCHEDULER_ENV, "rps"),
        help=f"scheduler the tests build: rps (RPSScheduler/RPSAsyncScheduler) or stock [{SCHEDULER_ENV}]",
    )
    group.addoption(
        "--rps-no-xfail",
        action="store_true",
        default=os.environ.get(XFAIL_ENV, "1") == "0",
        help=f"do not mark the listed expected failures as xfail (see them fail) [{XFAIL_ENV}=0]",
    )


def setup_offline_hub(hub_cache: Path) -> None:
    """Write the fake hub and point the Hugging Face clients at it, offline.

    huggingface_hub reads these variables once, at import: importing it earlier would leave it on the
    real cache (and online), so that is refused rather than half-applied."""
    if "huggingface_hub" in sys.modules:
        raise pytest.UsageError("huggingface_hub was imported before the offline hub was set up")
    from vllm_upstream.fake_hub import write_fake_hub

    write_fake_hub(hub_cache)
    os.environ["HF_HUB_CACHE"] = str(hub_cache)
    os.environ["HF_HOME"] = str(hub_cache.parent / "hf-home")
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[key] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_CACHE_ROOT", str(hub_cache.parent / "vllm-cache"))


def pretend_triton_for_config() -> None:
    """Let `VllmConfig` choose its model runner as on vLLM's CI GPUs, where Triton is installed.

    Without Triton (this CPU machine) it always falls back to the V1 model runner, which refuses async
    scheduling with pipeline parallelism: some scheduler tests build exactly that. Only the flag that
    `vllm.config.vllm` reads is set; no Triton kernel is imported. (Setting VLLM_USE_V2_MODEL_RUNNER
    instead would not do: tests read it to pick the runner flavour they exercise.)"""
    import vllm.config.vllm as vllm_config_module

    vllm_config_module.HAS_TRITON = True


# At import, when pytest loads this plug-in (`-p`): before any later plug-in or test module can import
# vLLM, and with it huggingface_hub.
setup_offline_hub(Path(os.environ.get(HUB_ENV) or DEFAULT_HUB))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    pretend_triton_for_config()
    for marker in VLLM_MARKERS:
        config.addinivalue_line("markers", f"{marker}: vLLM test marker")


def pytest_report_header(config: pytest.Config) -> list[str]:
    import vllm

    return [
        f"vLLM upstream tests: vLLM {vllm.__version__}, scheduler={config.getoption(SCHEDULER_OPTION)}, "
        f"hub cache={os.environ['HF_HUB_CACHE']}"
    ]


def _test_modules() -> Iterator[ModuleType]:
    """vLLM's test modules imported so far (tests.*), helpers included."""
    for name, module in list(sys.modules.items()):
        if (name == "tests" or name.startswith("tests.")) and module is not None:
            yield module


def swap_schedulers() -> list[str]:
    """Replace vLLM's scheduler classes with RPS's in the globals of vLLM's test modules.

    Names bound to the classes (`from ... import Scheduler`) are rebound, so that `create_scheduler`
    and the tests that call `Scheduler(...)` themselves build ours; subclasses a module defined at import
    (none in tests/v1/core) would keep vLLM's base. Returns `module.name` for every rebinding."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    from rps_serve.vllm_plugin.scheduler import RPSAsyncScheduler, RPSScheduler

    replacement: dict[int, type] = {id(Scheduler): RPSScheduler, id(AsyncScheduler): RPSAsyncScheduler}
    swapped: list[str] = []
    for module in _test_modules():
        for name, value in list(vars(module).items()):
            if id(value) in replacement:
                setattr(module, name, replacement[id(value)])
                swapped.append(f"{module.__name__}.{name}")
    return sorted(swapped)


def _mark(item: pytest.Item, expectation: Expectation) -> None:
    item.add_marker(pytest.mark.xfail(reason=expectation.describe(), strict=True, run=expectation.run))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rps = config.getoption(SCHEDULER_OPTION) == "rps"
    if rps:
        _swapped[:] = swap_schedulers()
        if not _swapped:
            raise pytest.UsageError("found no vLLM scheduler class to replace in the collected tests")
    if config.getoption("--rps-no-xfail"):
        return
    import vllm

    try:
        expected = expectations_for(rps=rps, version=vllm.__version__)
    except UnknownVersionError as error:
        raise pytest.UsageError(f"{error}: run with --rps-no-xfail to see what fails") from None
    for item in items:
        short = _short_id(item.nodeid)
        expectation = expected.get(short) or expected.get(short.partition("[")[0])
        if expectation is not None:
            _mark(item, expectation)


def _short_id(nodeid: str) -> str:
    """`tests/v1/core/test_x.py::test_y[param]`, the node id from vLLM's source tree on: the key the
    expectation lists use (with or without the parameters)."""
    path, _, name = nodeid.partition("::")
    path = path[path.index("tests/") :] if "tests/" in path else path
    return f"{path}::{name}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    scheduler = config.getoption(SCHEDULER_OPTION)
    terminalreporter.section(f"vLLM upstream scheduler tests ({scheduler})")
    if scheduler == "rps":
        terminalreporter.write_line(f"RPS classes bound in place of vLLM's: {', '.join(_swapped)}")
    else:
        terminalreporter.write_line("vLLM's stock Scheduler / AsyncScheduler (no swap)")


# Fixtures the scheduler tests take from vLLM's tests/conftest.py (not loaded: --noconftest).


@pytest.fixture()
def temporary_enable_log_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let vLLM's log records reach the root logger (and so caplog) for one test."""
    from vllm.logger import DEFAULT_LOGGING_CONFIG

    monkeypatch.setitem(DEFAULT_LOGGING_CONFIG["loggers"]["vllm"], "propagate", True)
    monkeypatch.setattr(logging.getLogger("vllm"), "propagate", True)


@pytest.fixture()
def caplog_vllm(
    temporary_enable_log_propagate: None, caplog: pytest.LogCaptureFixture
) -> Iterator[pytest.LogCaptureFixture]:
    """caplog at INFO with vLLM's logger propagating, as vLLM's conftest defines it."""
    with caplog.at_level(logging.INFO):
        yield caplog
