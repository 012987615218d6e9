"""The one urgency vocabulary of heron: bus events, messages to people and requests to a human.

`low < normal < high < urgent`. What each word does to a message is `heron.collaboration.outbox`'s
(channels, quiet hours, recall); what it does to an event is the bus's (`urgent` interrupts).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = ["URGENCIES", "Urgency", "at_least"]

Urgency = Literal["low", "normal", "high", "urgent"]
"""How soon a person should see something: `low`, `normal`, `high`, `urgent`."""
URGENCIES: Final[tuple[Urgency, ...]] = get_args(Urgency)
_RANK: Final[dict[str, int]] = {word: rank for rank, word in enumerate(URGENCIES)}


def at_least(urgency: str, floor: str) -> bool:
    """`urgency` is `floor` or more urgent (`KeyError` for a word outside the vocabulary)."""
    return _RANK[urgency] >= _RANK[floor]
