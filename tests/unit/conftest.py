"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest

from support.engine import Events


@pytest.fixture
def events() -> Events:
    return Events()
