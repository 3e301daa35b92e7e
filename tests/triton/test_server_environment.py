"""The environment the local tritonserver runs in."""

from __future__ import annotations

import pytest

from rps_serve.triton.server import server_environment


def test_malloc_arenas_are_capped_unless_the_caller_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert server_environment()["MALLOC_ARENA_MAX"] == "2"
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert server_environment()["MALLOC_ARENA_MAX"] == "8"
    assert server_environment({"MALLOC_ARENA_MAX": "4"})["MALLOC_ARENA_MAX"] == "4"
