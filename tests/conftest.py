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
