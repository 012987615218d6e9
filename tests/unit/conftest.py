"""Fixtures shared by the unit tests."""

from __future__ import annotations

import pytest
from engine_support import Events


@pytest.fixture
def events() -> Events:
    return Events()
