"""The ``servers`` fixture: start `secinfer serve` processes, stop them after the test."""

import pytest

from serve_helpers import Servers


@pytest.fixture
def servers(tmp_path):
    made = []

    def start(protocol, model, extra=(), **settings):
        s = Servers(tmp_path, protocol, model, extra, **settings)
        made.append(s)
        return s
    yield start
    for s in made:
        s.terminate(timeout=15)
