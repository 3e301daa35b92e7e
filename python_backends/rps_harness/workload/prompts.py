"""Filler text for prompts: fresh random words, so that no two requests share a prefix."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

# How `workload.content.ContentPlan.contents` sizes texts, as a run's record names it
# (`loadtest.claims.trace_texts`): words that are one token each on the served tokenizer, as many as
# the trace's text tokens. (Here, not in `content`, so that the claims page reads it without the
# served model's processor.)
TRACE_TEXTS = "tokens"

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "is", "um", "pe", "da")
# The words a request's text may be made of where its token count matters: short, so that a large
# vocabulary keeps many of them whole (the tiny models' tokenizer, trained on such text, 237 of 240).
CANDIDATE_WORDS = _SYLLABLES + tuple(first + second for first in _SYLLABLES for second in _SYLLABLES)
# Fewer whole words than this and the first KV blocks of two requests could match (a prefix cache hit).
MIN_ONE_TOKEN_WORDS = 8


def filler_text(words: int, rng: random.Random, vocabulary: Sequence[str] | None = None) -> str:
    """`words` random words from `vocabulary`, else pseudo-words of one to four syllables (about 1.5
    tokens each on the tiny models' tokenizer); random content defeats the prefix cache between requests.

    With a vocabulary of `one_token_words`, the text is exactly `words` tokens on that tokenizer.
    """
    if vocabulary is not None:
        return " ".join(rng.choices(vocabulary, k=words))
    return " ".join("".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(words))


def one_token_words(tokenizer: Any) -> tuple[str, ...]:
    """The `CANDIDATE_WORDS` that `tokenizer` keeps as one token both first in a text and after a space,
    so that n of them joined by spaces are n tokens (a byte-level BPE splits words at spaces first)."""
    spellings = [spelling for word in CANDIDATE_WORDS for spelling in (word, " " + word)]
    ids = tokenizer(spellings, add_special_tokens=False)["input_ids"]
    words = tuple(
        word
        for word, alone, spaced in zip(CANDIDATE_WORDS, ids[::2], ids[1::2], strict=True)
        if len(alone) == len(spaced) == 1
    )
    if len(words) < MIN_ONE_TOKEN_WORDS:
        raise ValueError(
            f"{type(tokenizer).__name__} keeps only {len(words)} of the filler's candidate words as one "
            f"token (at least {MIN_ONE_TOKEN_WORDS} are needed to size texts exactly); "
            "add words it keeps whole to rps_harness.workload.prompts.CANDIDATE_WORDS"
        )
    return words
