"""The soak's requests: every cycle asks for the same work, with text and pixels of its own."""

from __future__ import annotations

from itertools import islice

import pytest

from rps_harness.client import Generation
from rps_harness.loadtest.capacity import request_stream
from rps_harness.loadtest.soak import SOAK_CONTENT
from rps_harness.workload.request_format import RequestFormat


def _shape(generation: Generation) -> tuple[int, bool, int, int]:
    return (
        len(generation.images),
        generation.video is not None,
        len(generation.prompt.split()),
        generation.sampling_parameters["max_tokens"],
    )


@pytest.mark.slow
def test_cycles_repeat_the_work_with_fresh_content(qwen_format: RequestFormat) -> None:
    n = 300  # more than one batch of the trace
    first = list(
        islice(request_stream("mixed-iii", qwen_format, seed=3, content_seed=1 << 32, limits=SOAK_CONTENT), n)
    )
    again = list(
        islice(request_stream("mixed-iii", qwen_format, seed=3, content_seed=2 << 32, limits=SOAK_CONTENT), n)
    )
    assert [_shape(g) for g in first] == [_shape(g) for g in again]
    assert len({_shape(g)[:2] for g in first}) > 1  # a mix, not one kind of request
    assert all(a.prompt != b.prompt for a, b in zip(first, again, strict=True))
    assert all(a.images != b.images for a, b in zip(first, again, strict=True) if a.images)
    other = list(
        islice(request_stream("mixed-iii", qwen_format, seed=4, content_seed=1 << 32, limits=SOAK_CONTENT), n)
    )
    assert [_shape(g) for g in first] != [_shape(g) for g in other]
