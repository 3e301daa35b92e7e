"""Filler text for prompts: fresh pseudo-words, so that no two requests share a prefix."""

from __future__ import annotations

import random

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "is", "um", "pe", "da")


def filler_text(words: int, rng: random.Random) -> str:
    """`words` random pseudo-words; random content defeats the prefix cache between requests."""
    return " ".join("".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(words))
