"""Decode hold: a heavy request waits, briefly, for the lighter requests running beside it to finish.

Every request in the engine waits for each step to end, and a step that runs a heavy request's vision
encoder or a long prefill chunk lasts tens of decode steps (on the CPU stack ~350 ms against ~6 ms).
Class order admits sand while heavier requests wait, so more light requests are decoding when the
heavy one starts than under arrival order, and each of them sits through its long steps: the time
per output token pays for the first-token time that class order wins.

A held request stays out of the engine until the lighter requests that were running when its hold
began have finished, or until `max_hold_s` has passed, whichever comes first; light requests that
arrive during the hold do not extend it. A request is held once at most, so the hold adds at most
`max_hold_s` to any request's wait (and to the starvation bound).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass


@dataclass
class Hold:
    """One request's hold: when it began, and the lighter requests it waits for."""

    since: float
    waiting_for: frozenset[Hashable]
    released: bool = False

    @classmethod
    def begin(cls, level: int, running: Mapping[Hashable, int], now: float) -> Hold:
        """A hold for a request of class `level`, given the running requests' classes; one with
        nobody lighter running is released from the start."""
        lighter = frozenset(key for key, running_level in running.items() if running_level < level)
        return cls(now, lighter, released=not lighter)

    @classmethod
    def released_at(cls, now: float) -> Hold:
        """A request that is never held (a text, where only media are)."""
        return cls(now, frozenset(), released=True)

    def keeps(self, running: Collection[Hashable], now: float, max_hold_s: float) -> bool:
        """Whether the request still sits out this step; once released it never is again."""
        if not self.released and (now - self.since >= max_hold_s or self.waiting_for.isdisjoint(running)):
            self.released = True
        return not self.released
