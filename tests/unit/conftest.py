"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heron._support.clock import FakeClock
from support.clock import FakeTime
from support.connectors import ApiServer
from support.engine import Events
from support.protocol_servers import ProtocolServer, Sleeps, serve


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def clock() -> FakeClock:
    """The tests' fake clock; pass `clock.time` where a callable clock is expected."""
    return FakeClock()


@pytest.fixture
def api_server() -> Iterator[ApiServer]:
    """The connectors' loopback API server (routes scripted per test)."""
    api = ApiServer().start()
    yield api
    api.stop()


@pytest.fixture
def fake_time() -> FakeTime:
    """The connectors' clock: their sleeps return at once and move it on."""
    return FakeTime()


@pytest.fixture
def protocol_server() -> Iterator[ProtocolServer]:
    """A loopback server speaking the providers' protocols."""
    with serve() as running:
        yield running


@pytest.fixture
def sleeps() -> Sleeps:
    """The waits a retry policy asks for, recorded instead of slept."""
    return Sleeps()
