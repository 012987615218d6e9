"""The contract suites: one per store protocol, written against the protocol and run against
every back end of `support.stores.BACKENDS` (the `backend` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.stores import BACKENDS, StoreBackend


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    opened = BACKENDS[request.param](tmp_path / "state")
    try:
        yield opened
    finally:
        opened.close()
