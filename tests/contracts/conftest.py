"""The contract suites: one per store protocol, written against the protocol and run against
every back end of `support.stores.BACKENDS` that implements the stores the suite opens (the
`backend` fixture)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.postgres import postgres_server, postgres_url
from support.stores import BACKENDS, StoreBackend, open_backend

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

_OPENS = re.compile(r"\bbackend\.(\w+)\(")


def suite_backends(source: str) -> list[str]:
    """The back ends that implement every store a suite's source opens (`backend.<store>()`)."""
    needed = set(_OPENS.findall(source)) - {"close"}
    return sorted(name for name, stores in BACKENDS.items() if needed <= stores)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        names = suite_backends(inspect.getsource(metafunc.module))
        metafunc.parametrize("backend", names, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    opened = open_backend(request.param, request, tmp_path / "state")
    try:
        yield opened
    finally:
        opened.close()
