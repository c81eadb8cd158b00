"""The mutation run over every registered protocol's malicious-security checks.

``pytest --mutation-run report.json tests/`` (mutation_plugin.py) reruns every test marked
``covers_check(protocol, check)`` with that check alone disabled; this module runs it in a
subprocess and asserts from its report that every declared check is covered by a test
that then fails, that every covering test fails, and that no test names an undeclared
check. A self-test runs the plugin on a tiny protocol of this folder (fake_check_cases.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from secinfer.protocols import registry

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(900)]


def mutation_report(tmp: Path, *paths: str) -> dict:
    out = tmp / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--mutation-run", str(out), *paths], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ), timeout=850)
    # 1: covering tests failed (what a mutation run wants); 5: no covering test collected
    assert proc.returncode in (0, 1, 5), f"mutation run exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    return json.loads(out.read_text())


def declared() -> dict:
    return {f"{name}:{c.name}": c for name in registry.names() for c in registry.get(name).checks}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return mutation_report(tmp_path_factory.mktemp("mutation"), "tests/")


@pytest.mark.slow
def test_every_declared_check_has_a_covering_test(report):
    missing = sorted(set(declared()) - set(report["checks"]))
    assert not missing, f"declared checks no test marks with covers_check: {missing}"
    assert report["uncovered"] == [], f"declared checks no test catches when disabled: {report['uncovered']}"


@pytest.mark.slow
def test_every_covering_test_fails_with_its_check_disabled(report):
    passed = sorted(f"{k}: {t}" for k, v in report["checks"].items() for t, failed in v["tests"].items()
                    if not failed)
    assert not passed, "these adversarial tests still pass with their check disabled:\n" + "\n".join(passed)


@pytest.mark.slow
def test_no_covering_test_names_an_undeclared_check(report):
    assert report["undeclared"] == [], f"covers_check names checks no protocol declares: {report['undeclared']}"


def test_checks_are_well_formed():
    for name in registry.names():
        spec = registry.get(name)
        names = [c.name for c in spec.checks]
        assert len(names) == len(set(names)), f"{name}: a check is declared twice"
        for c in spec.checks:
            assert c.what, f"{name}:{c.name} says nothing about what it verifies"
            assert c.securities and set(c.securities) <= set(spec.securities), \
                f"{name}:{c.name} runs at {c.securities}, the protocol offers {spec.securities}"


def test_protocols_with_malicious_security_declare_their_checks():
    # A protocol offering security against a malicious party runs checks; each must be
    # declared in ProtocolSpec.checks so that the mutation run can attack it.
    bare = [n for n in registry.names()
            if {"malicious", "fair"} & set(registry.get(n).securities) and not registry.get(n).checks]
    assert not bare, f"protocols with a malicious/fair level but no declared checks (ProtocolSpec.checks): {bare}"


def test_mutation_plugin_self_test(tmp_path):
    """On fake_check_cases.py: the covering test is reported as failing with its check
    off (covered), the non-covering one as passing, the undeclared check as such."""
    rep = mutation_report(tmp_path, "tests/conformance/fake_check_cases.py")
    tests = rep["checks"]["fake-mac:fake-tag"]["tests"]
    by_name = {nodeid.rsplit("::", 1)[1]: failed for nodeid, failed in tests.items()}
    assert by_name == {"test_covering": True, "test_not_covering": False}
    assert rep["checks"]["fake-mac:fake-tag"]["what"]
    assert "fake-mac:fake-tag" not in rep["uncovered"]
    assert rep["undeclared"] == ["fake-mac:no-such-check"]
