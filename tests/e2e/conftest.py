"""Fixtures for the end-to-end tests of the `heron` command."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli import Heron


@pytest.fixture
def heron(tmp_path: Path) -> Iterator[Heron]:
    cli = Heron(tmp_path)
    try:
        yield cli
    finally:
        cli.stop_all()


@pytest.fixture
def workspace(heron: Heron) -> Path:
    """A project folder of the scratch directory (the one an editor has open)."""
    path = heron.root / "project"
    path.mkdir()
    return path
