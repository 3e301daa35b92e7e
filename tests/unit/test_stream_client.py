"""A request sent on a stream the server has already broken ends with an error, not lost."""

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
