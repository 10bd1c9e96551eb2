"""Fixtures for the transport tests: an in-process counting oracle and a threaded server on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rcvgp.oracle import CallableOracle
from rcvgp.transport.server import OracleServer
from wire_helpers import SPEC, CountingFn


@pytest.fixture
def fn() -> CountingFn:
    return CountingFn()


@pytest.fixture
def oracle(fn: CountingFn) -> CallableOracle:
    return CallableOracle(fn, SPEC)


@pytest.fixture
def server(oracle: CallableOracle) -> Iterator[OracleServer]:
    srv = OracleServer(oracle, "tcp://127.0.0.1:*", max_message_bytes=2**20).start()
    yield srv
    srv.stop()
