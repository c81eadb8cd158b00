"""Every CRISP test may run the insecure ``plain-insecure`` linear engine (plain_engine.py):
it is registered here, for the duration of each test, never in protocol code."""

import pytest

from plain_engine import factory


@pytest.fixture(autouse=True)
def _plain_insecure_engine(monkeypatch):
    from secinfer.protocols.crisp import linear

    monkeypatch.setitem(linear.ENGINES, "plain-insecure", factory)
