"""The ``servers`` fixture: start `secinfer serve` processes, stop them after the test (and,
when the test failed, print their logs: a served session's failure is often explained only
by another party's log line, e.g. why the server that closed a session failed)."""

import pytest

from serve_helpers import Servers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.serve_call_failed = rep.failed


@pytest.fixture
def servers(tmp_path, request):
    made = []

    def start(protocol, model, extra=(), **settings):
        s = Servers(tmp_path, protocol, model, extra, **settings)
        made.append(s)
        return s
    yield start
    failed = getattr(request.node, "serve_call_failed", False)
    for s in made:
        s.terminate(timeout=15)
        if failed:   # (shown under "Captured stdout teardown")
            for pid in s.ids:
                text = (tmp_path / f"serve-{pid}.log").read_text(errors="replace")
                print(f"---- serve {pid} log ----\n{text[-6000:]}")
