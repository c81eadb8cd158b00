"""Disable one malicious-security check from the tests, never from protocol code.

Protocols route every check through ``Endpoint.require`` or ``ProtocolAbort.require``
(secinfer.net.channel / secinfer.errors) and declare its name in ``ProtocolSpec.checks``.
An adversarial test says which check it covers with
``@pytest.mark.covers_check("astra", "trip-bucket")`` (one marker per test, or per
``pytest.param``): it must pass with every check on and fail when that check alone is off.

Options (registered by tests/conftest.py):
``--disable-check NAME``  turn check NAME off in every test of this run (by hand);
``--mutation-run FILE``   run only the covering tests, each with its own check off, and
                          write FILE (JSON): per protocol:check the covering tests and
                          whether each failed; plus the declared checks no test covers.
The patches work in this process only: a covering test runs its parties in-process
(LocalHub threads), not as OS processes.
"""

from __future__ import annotations

import contextlib
import json

import pytest

from secinfer.errors import ProtocolAbort
from secinfer.net.channel import Endpoint

MARK = "covers_check"


def pytest_addoption(parser):
    g = parser.getgroup("secinfer conformance")
    g.addoption("--disable-check", action="append", default=[], metavar="NAME",
                help="turn a malicious-security check off (mutation testing)")
    g.addoption("--mutation-run", default=None, metavar="FILE",
                help="run each covers_check test with its check off; write a JSON report")


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARK}(protocol, check): the malicious-security check "
                            "this adversarial test covers (fails when that check alone is off)")
    config._mutation_results = {}


def covered(item) -> tuple[str, str] | None:
    marks = list(item.iter_markers(MARK))
    if not marks:
        return None
    if len(marks) > 1:
        raise pytest.UsageError(f"{item.nodeid}: one covers_check marker per test, got {len(marks)}")
    protocol, check = marks[0].args
    return protocol, check


@contextlib.contextmanager
def checks_disabled(names):
    """Within the block, ``require`` calls for these check names do nothing."""
    names = frozenset(names)
    if not names:
        yield
        return
    ep_require, abort_require = Endpoint.require, ProtocolAbort.require.__func__

    def ep_patched(self, ok, check, suspect=None, detail=""):
        if check not in names:
            ep_require(self, ok, check, suspect, detail)

    def abort_patched(cls, ok, check, suspect=None, detail=""):
        if check not in names:
            abort_require(cls, ok, check, suspect, detail)

    Endpoint.require = ep_patched
    ProtocolAbort.require = classmethod(abort_patched)
    try:
        yield
    finally:
        Endpoint.require = ep_require
        ProtocolAbort.require = classmethod(abort_require)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--mutation-run"):
        keep = [it for it in items if covered(it) is not None]
        config.hook.pytest_deselected(items=[it for it in items if covered(it) is None])
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    names = list(item.config.getoption("--disable-check"))
    if item.config.getoption("--mutation-run"):
        names.append(covered(item)[1])
    with checks_disabled(names):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if item.config.getoption("--mutation-run") and rep.when == "call":
        protocol, check = covered(item)
        item.config._mutation_results.setdefault(f"{protocol}:{check}", {})[item.nodeid] = rep.failed


def pytest_sessionfinish(session):
    path = session.config.getoption("--mutation-run")
    if not path:
        return
    from secinfer.protocols import registry

    declared = {}
    for name in registry.names():
        for c in registry.get(name).checks:
            declared[f"{name}:{c.name}"] = c.what
    results = session.config._mutation_results
    report = {
        "checks": {k: {"what": declared.get(k), "tests": v} for k, v in sorted(results.items())},
        "uncovered": sorted(k for k in declared if not any(results.get(k, {}).values())),
        "undeclared": sorted(k for k in results if k not in declared),
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
