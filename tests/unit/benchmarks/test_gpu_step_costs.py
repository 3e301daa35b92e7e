"""The GPU step benchmark's forward pass computes what a model computes, and every measured row
gets the simulator's prediction beside it (run on a CPU with the tiny shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from benchmarks.gpu_step_comparison import comparison_table
from benchmarks.gpu_step_costs import SHAPES, TINY_PLAN, Stack, measure


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, context: int) -> torch.Tensor:
    """Grouped-query attention with an explicit mask: token i of the chunk sees context + i + 1 keys."""
    tokens, total = q.shape[1], k.shape[1]
    visible = torch.arange(total)[None, :] <= torch.arange(tokens)[:, None] + context
    return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=visible, enable_gqa=True)[0]


@pytest.mark.parametrize("context", [0, 5])
def test_chunk_attention_matches_grouped_query_attention(context: int) -> None:
    stack = Stack(SHAPES["tiny"], torch.device("cpu"), torch.float32)
    s = stack.shape
    tokens = 7
    q = torch.randn(tokens, s.heads * s.head_dim)
    k, v = torch.randn(2, tokens, s.kv_heads * s.head_dim)
    cache = torch.randn(2, s.kv_heads, context, s.head_dim)
    out = stack._chunk_attention(q, k, v, context, cache)

    def heads(t: torch.Tensor, n: int) -> torch.Tensor:
        return t.view(tokens, n, s.head_dim).transpose(0, 1)

    keys = torch.cat((cache[0], heads(k, s.kv_heads)), dim=1)
    values = torch.cat((cache[1], heads(v, s.kv_heads)), dim=1)
    expected = _reference_attention(heads(q, s.heads), keys, values, context)
    torch.testing.assert_close(out, expected.transpose(0, 1).reshape(tokens, -1))


def test_decode_attention_matches_grouped_query_attention() -> None:
    stack = Stack(SHAPES["tiny"], torch.device("cpu"), torch.float32)
    s = stack.shape
    batch, length = 3, 6
    q = torch.randn(batch, s.heads, 1, s.head_dim)
    kv = torch.randn(2, batch, s.kv_heads, length, s.head_dim)
    expected = F.scaled_dot_product_attention(q, kv[0], kv[1], enable_gqa=True).reshape(batch, -1)
    torch.testing.assert_close(stack._decode_attention(q.reshape(batch, -1), kv), expected)


def test_every_measured_row_is_compared(tmp_path: Path) -> None:
    result = measure(["tiny", "tiny-encoder"], torch.device("cpu"), TINY_PLAN)
    rows = [row for shape in result["shapes"].values() for row in shape["rows"]]
    assert rows and all(row["seconds"] > 0 for row in rows)
    table = comparison_table(result)
    data_lines = [line for line in table.splitlines() if line.startswith("| ") and "measured ms" not in line]
    # decode rows get two predictions (the simulator's H100 and the measured GPU's bandwidth), encoder
    # rows two (as image crops and as video frames), the rest one
    expected = sum(2 if row["kind"] == "encoder" or row.get("decodes") else 1 for row in rows)
    assert len(data_lines) == expected
