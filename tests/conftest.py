import pytest

pytest_plugins = ["conformance.mutation_plugin"]


@pytest.fixture(autouse=True)
def _registry_unchanged():
    """A test that registers a test-only protocol (``run_local(protocol_module=...)`` does)
    must not leave it registered for the next test in the same worker: tests that iterate
    over every registered protocol would run it."""
    from secinfer.protocols import registry

    before = dict(registry._MODULES)
    yield
    registry._MODULES.clear()
    registry._MODULES.update(before)


@pytest.fixture
def recorded_marks(monkeypatch):
    """Every ``Endpoint.mark`` call of the test as (party, name), in order (the marks feed
    `secinfer run`'s live progress line)."""
    from secinfer.net.channel import Endpoint

    seen = []
    orig = Endpoint.mark

    def record(self, name):
        seen.append((self.me, name))
        orig(self, name)
    monkeypatch.setattr(Endpoint, "mark", record)
    return seen
