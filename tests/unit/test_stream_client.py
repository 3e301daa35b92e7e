"""A request sent on a stream the server has already broken, or on one that breaks while it waits,
ends with an error, not lost."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from rps_harness.client import StreamClient

BROKEN = "The stream is no longer in valid state"


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise InferenceServerException(msg=BROKEN)


def test_a_request_on_a_broken_stream_ends_with_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # No server listens: the stream starts lazily, and tritonclient refuses the send as on a broken one.
    client = StreamClient("127.0.0.1:1")
    try:
        monkeypatch.setattr(client.client, "async_stream_infer", _refuse)
        client.submit("vllm_model", "a", {"text_input": np.array([b"hi"], dtype=np.object_)})
        result = client.wait("a", timeout_s=1)
        assert result.error is not None and BROKEN in result.error and '"a"' in result.error
        assert client.tally().lost == 0
    finally:
        monkeypatch.undo()
        client.close()


def test_a_stream_that_breaks_ends_every_request_still_outstanding(monkeypatch: pytest.MonkeyPatch) -> None:
    client = StreamClient("127.0.0.1:1")
    try:
        monkeypatch.setattr(client.client, "async_stream_infer", lambda *args, **kwargs: None)
        for request_id in ("a", "b", "c"):
            client.submit("vllm_model", request_id, {"text_input": np.array([b"hi"], dtype=np.object_)})
        # A request's own error (no gRPC status) names it and ends it alone.
        client._on_response(None, InferenceServerException(msg='request "a": refused'))
        assert client.pending() == ["b", "c"]
        # What tritonclient hands the callback as the connection drops: then it reads no more.
        reset = "Stream removed (recvmsg:Connection reset by peer (104))"
        client._on_response(None, InferenceServerException(msg=reset, status="StatusCode.UNAVAILABLE"))
        assert client.pending() == [] and client.tally().lost == 0
        for request_id in ("b", "c"):
            error = client.results[request_id].error
            assert error is not None and reset in error and f'"{request_id}"' in error
    finally:
        monkeypatch.undo()
        client.close()
