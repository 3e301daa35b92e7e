"""The demo's server handling: which runs start a server, which take one over, and that every server
stops, in the background or at the end."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from rps_harness.loadtest import demo
from rps_harness.local.server import Endpoints


class _Launcher:
    """Stands in for `demo._server`: tritonserver itself is started by the e2e tier and `make demo`;
    here only the order of starts and stops is under test."""

    def __init__(self, fail_stop: str = "") -> None:
        self.events: list[str] = []
        self.fail_stop = fail_stop
        self.lock = threading.Lock()

    def __call__(
        self, config: demo.DemoConfig, placement: object, policy: str, name: str, run_log: Path
    ) -> AbstractContextManager[Endpoints]:
        @contextmanager
        def server() -> Iterator[Endpoints]:
            with self.lock:
                self.events.append(f"start {name}")
            yield Endpoints(1, 2, 3, pid=len(self.events))
            with self.lock:
                self.events.append(f"stop {name}")
            if name == self.fail_stop:
                raise RuntimeError(f"{name} did not stop")

        return server()


def _config(tmp_path: Path, reuse: bool) -> demo.DemoConfig:
    (tmp_path / "runs").mkdir()
    return demo.DemoConfig(tmp_path, tmp_path, tmp_path, reuse_servers=reuse)


@pytest.mark.parametrize("reuse", [True, False])
def test_the_first_runs_take_over_the_capacity_server_only_when_servers_are_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reuse: bool
) -> None:
    launcher = _Launcher()
    monkeypatch.setattr(demo, "_server", launcher)
    with demo._Servers(_config(tmp_path, reuse), None) as servers:
        capacity = servers.start("fcfs", "capacity", runs=False)
        first = servers.start("fcfs", "fcfs-1")
        assert (first == capacity) is reuse
        assert servers.run_log.name == ("capacity.jsonl" if reuse else "fcfs-1.jsonl")
        servers.start("rps", "rps-1")
        servers.start("fcfs", "fcfs-2")  # a server that served runs is never taken over
    starts = [e for e in launcher.events if e.startswith("start")]
    assert starts == ["start capacity", *([] if reuse else ["start fcfs-1"]), "start rps-1", "start fcfs-2"]
    assert sorted(e.removeprefix("stop ") for e in launcher.events if e.startswith("stop")) == sorted(
        s.removeprefix("start ") for s in starts
    )


def test_a_policy_other_than_the_capacity_search_s_starts_its_own_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = _Launcher()
    monkeypatch.setattr(demo, "_server", launcher)
    with demo._Servers(_config(tmp_path, True), None) as servers:
        servers.start("fcfs", "capacity", runs=False)
        servers.start("rps", "rps-1")
    assert [e for e in launcher.events if e.startswith("start")] == ["start capacity", "start rps-1"]
    assert {e for e in launcher.events if e.startswith("stop")} == {"stop capacity", "stop rps-1"}


def test_a_server_that_fails_to_stop_fails_the_demo_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "_server", _Launcher(fail_stop="fcfs-1"))
    with (
        pytest.raises(RuntimeError, match="fcfs-1 did not stop"),
        demo._Servers(_config(tmp_path, True), None) as servers,
    ):
        servers.start("fcfs", "fcfs-1")
        servers.start("rps", "rps-1")
