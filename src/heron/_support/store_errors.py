"""One translation of a back end's errors into `heron.errors.StoreError`, for every store.

`translate_errors(*failures)` makes a class decorator: the public methods of the store (sync,
async and class methods) raise `StoreError` where the back end raised one of `failures`, so
callers name no back end. `heron._support.state.sqlite_errors` and
`heron._support.postgres.pg_errors` are its two instances.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from heron.errors import StoreError

_T = TypeVar("_T", bound=type)


def translate_errors(*failures: type[BaseException]) -> Callable[[_T], _T]:
    """A class decorator translating `failures` into `StoreError` (see the module docstring)."""

    def decorate(cls: _T) -> _T:
        for name, member in list(vars(cls).items()):
            if name.startswith("_"):
                continue
            if isinstance(member, classmethod):
                setattr(cls, name, classmethod(_translated(member.__func__, failures)))
            elif inspect.isfunction(member):
                setattr(cls, name, _translated(member, failures))
        return cls

    return decorate


def _translated(
    func: Callable[..., Any], failures: tuple[type[BaseException], ...]
) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await func(*args, **kwargs)
            except failures as exc:
                raise StoreError(f"{func.__qualname__}: {type(exc).__name__}: {exc}") from exc

        return run_async

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except failures as exc:
            raise StoreError(f"{func.__qualname__}: {type(exc).__name__}: {exc}") from exc

    return run
