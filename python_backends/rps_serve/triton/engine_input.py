"""vLLM's input processing (tokenization, the HF multimodal processor) done by the caller, so that it
happens in the caller's order and threads rather than on vLLM's renderer executor, one thread in
arrival order by default (`renderer_num_workers`).

`render` gives what `AsyncLLM.generate` takes as an already processed input (a dict with a "type"
key), which `add_request` hands to the engine without processing it again. The functions used are
vLLM internals (0.32 and 0.33 alike), pinned by `tests/e2e/engine/test_vllm_contract.py`.

Ordering: vLLM's processor cache in this process mirrors the engine core's, without a lock, and a
rendered input whose media the cache already held carries none of their data. Requests with media
must therefore reach the engine in the order they were rendered, and every rendered one must reach
it: `MediaRenderer.render` renders them one at a time and hands each over before the next starts.
Text-only prompts touch no media cache and are rendered without waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class MediaRenderer:
    """Renders prompts for one `AsyncLLM` (after `prepare` has run on its event loop)."""

    def __init__(self, engine: Any) -> None:
        from vllm.renderers.inputs.preprocess import parse_model_prompt

        self._engine = engine
        self._parse = parse_model_prompt
        self._media_lock = threading.Lock()

    async def prepare(self) -> None:
        """Settle what the first `generate` would otherwise await (and so reorder): the supported tasks
        (cached after the first call), and vLLM's background multimodal warm-up."""
        await self._engine.get_supported_tasks()
        self._engine.renderer._join_mm_warmup()

    def render(
        self, prompt: dict[str, Any], arrival_time: float, deliver: Callable[[dict[str, Any]], None]
    ) -> None:
        """Process `prompt` ({"prompt", "multi_modal_data"}) and call `deliver` with the engine input;
        `arrival_time` (wall clock) is when the request arrived, so time spent waiting for this step
        counts as waiting in the scheduler's eyes. `deliver` must hand the input to the engine in call
        order (for example `loop.call_soon_threadsafe` of a future's result)."""
        if not prompt.get("multi_modal_data"):
            deliver(self._render(prompt, arrival_time))
            return
        with self._media_lock:
            deliver(self._render(prompt, arrival_time))

    def _render(self, prompt: dict[str, Any], arrival_time: float) -> dict[str, Any]:
        renderer = self._engine.renderer
        parsed = self._parse(self._engine.model_config, prompt)
        (engine_input,) = renderer.render_cmpl([parsed], renderer.default_cmpl_tok_params)
        rendered: dict[str, Any] = engine_input
        rendered["arrival_time"] = arrival_time
        return rendered
