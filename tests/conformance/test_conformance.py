"""Every registered protocol x security level x bundled model (the plan of ``secinfer demo``).

(a) the input role's output equals the fixed-point reference executor bit for bit, or
    stays within the protocol's documented budget (expectations.py);
(b) only the spec's ``input_role`` gets an output, every other role returns none;
(c) every message is metered in a phase, the same phase at both ends, and the phases
    carry the traffic the protocol declares (offline preprocessing, online evaluation).
The parties run in-process (harness.py); test_abort_processes.py runs OS processes.
"""

from __future__ import annotations

import pytest

from secinfer.protocols import registry

from . import properties
from .expectations import EXPECT
from .harness import cases, plan, run_case

CASES = cases()


def test_every_protocol_is_available_and_declares_its_expectations():
    notes = plan()[1]
    assert not notes, notes
    assert set(registry.names()) <= set(EXPECT), \
        f"add {sorted(set(registry.names()) - set(EXPECT))} to tests/conformance/expectations.py"
    for name in registry.names():  # every security level offered runs on some bundled model
        spec = registry.get(name)
        offered = {c.security for c in CASES if c.protocol == name}
        if EXPECT[name].get("bundled", True):
            assert offered == set(spec.securities), \
                f"{name}: no bundled model runs at {set(spec.securities) - offered}"
        else:
            assert not offered, f"{name}: declared to run no bundled model, but runs {offered}"


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def run(request):
    r = run_case(request.param)
    properties.finished(r)
    return r


def test_output_matches_fixed_point_reference(run):
    properties.output_within_budget(run)


def test_only_the_input_role_learns_the_output(run):
    properties.only_input_role_learns_output(run)


def test_every_phase_is_metered(run):
    properties.phases_metered(run)
