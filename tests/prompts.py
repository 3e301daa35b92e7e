"""User turns for the tiny Qwen2-VL the e2e tests serve, rendered by its own chat template."""

from __future__ import annotations

import functools

import jinja2

from rps_harness.local.tiny_model import QWEN_CHAT_TEMPLATE
from rps_serve.requests import Modality


@functools.cache
def _template() -> jinja2.Template:
    return jinja2.Environment().from_string(QWEN_CHAT_TEMPLATE)


def chat_prompt(text: str, modality: Modality) -> str:
    """One user turn with `text` and, for image and video, the medium's placeholder first."""
    parts = [] if modality is Modality.TEXT else [{"type": modality.value}]
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]
    return _template().render(messages=messages, add_generation_prompt=True)
