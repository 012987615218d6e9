"""Finding the exception that explains a failure, through exception groups and chains.

The SDK runs its transports in task groups, so an error raised in the OAuth flow reaches heron
wrapped in `ExceptionGroup`s and chained (`__cause__` / `__context__`).
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["find_cause"]

E = TypeVar("E", bound=BaseException)

_MAX_DEPTH = 20


def find_cause(exc: BaseException | None, kinds: type[E] | tuple[type[E], ...]) -> E | None:
    """The first exception of `kinds` in `exc`, its groups' members and its chain."""
    seen: set[int] = set()
    stack: list[tuple[BaseException, int]] = [(exc, 0)] if exc is not None else []
    while stack:
        current, depth = stack.pop()
        if id(current) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(current))
        if isinstance(current, kinds):
            return current
        chained = current.__cause__ or current.__context__
        if chained is not None:
            stack.append((chained, depth + 1))
        if isinstance(current, BaseExceptionGroup):
            stack.extend((inner, depth + 1) for inner in reversed(current.exceptions))
    return None
