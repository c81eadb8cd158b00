"""Every registered protocol x security level x bundled model (the plan of ``secinfer demo``).

(a) the input role's output equals the fixed-point reference executor bit for bit, or
    stays within the protocol's documented budget (tests/conformance/expectations.py);
(b) only the spec's ``input_role`` gets an output, every other role returns none;
(c) every message is metered in a phase, the same phase at both ends, and the phases
    carry the traffic the protocol declares (offline preprocessing, online evaluation).
The parties run in-process (LocalHub); test_abort_processes.py runs OS processes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from secinfer.ir import bundled
from secinfer.ir.fixed_exec import derived_error_bound, run_fixed
from secinfer.protocols import registry

from .expectations import EXPECT
from .harness import cases, plan, run_case

CASES = cases()
PHASES = ("setup", "offline", "online")


def test_every_protocol_is_available_and_declares_its_expectations():
    notes = plan()[1]
    assert not notes, notes
    assert set(registry.names()) <= set(EXPECT), \
        f"add {sorted(set(registry.names()) - set(EXPECT))} to tests/conformance/expectations.py"
    # the plan covers every protocol and every security level it offers on some model
    for name in registry.names():
        spec = registry.get(name)
        offered = {c.security for c in CASES if c.protocol == name}
        assert offered == set(spec.securities), f"{name}: no bundled model runs at {set(spec.securities) - offered}"


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def run(request):
    r = run_case(request.param)
    failed = {role: v for role, v in r.results.items() if isinstance(v, BaseException)}
    if failed:
        raise next(iter(failed.values()))
    return r


def test_output_matches_fixed_point_reference(run):
    spec, cfg = run.spec, run.cfg
    res = run.results[spec.input_role]
    ref = run_fixed(run.graph, run.x, cfg)
    assert res.output is not None and res.output_ring is not None
    out = np.asarray(res.output, dtype=np.float64)
    ring = np.asarray(res.output_ring)
    assert ring.shape == ref.shape and out.shape == ref.shape, (ring.shape, out.shape, ref.shape)
    budget = EXPECT[spec.name]["budget"]
    if budget == "exact":
        assert np.array_equal(ring, ref), f"{spec.name}: {np.count_nonzero(ring != ref)} elements differ"
        assert np.array_equal(out, cfg.decode(ref))
    elif budget == "derived":
        tol = 2 * derived_error_bound(run.graph, cfg, x=run.x)["bound"]
        err = float(np.max(np.abs(out - cfg.decode(ref))))
        assert err <= tol, f"{spec.name}: max error {err} over the budget {tol}"
    else:
        kind, units = budget
        assert kind == "units"
        diff = np.abs(cfg.ring.to_signed(cfg.ring.sub(ring, ref)))
        assert int(diff.max()) < units, f"{spec.name}: {int(diff.max())} units off (budget < {units})"
        model = run.case.model
        assert np.array_equal(bundled.predict_from_output(model, out.reshape(len(run.x), -1)),
                              bundled.predict_from_output(model, cfg.decode(ref).reshape(len(run.x), -1)))


def test_only_the_input_role_learns_the_output(run):
    spec = run.spec
    assert run.results[spec.input_role].output is not None
    for role, res in run.results.items():
        if role != spec.input_role:
            assert res is None or (res.output is None and res.output_ring is None), \
                f"{spec.name}: role {role} returned an output"


def test_every_phase_is_metered(run):
    spec, meters = run.spec, run.meters
    assert set(meters) == set(spec.roles)
    # each message is counted by its sender and its receiver, in the same phase, same size
    sent, recv = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for role, m in meters.items():
        for (ph, d, peer, tag), c in m.counters.items():
            if tag.startswith("__"):
                continue
            key = (ph, role, peer, tag) if d == "sent" else (ph, peer, role, tag)
            tgt = sent if d == "sent" else recv
            tgt[key][0] += c.payload
            tgt[key][1] += c.messages
    assert dict(sent) == dict(recv), \
        f"{spec.name}: metered differently at the two ends: {set(sent) ^ set(recv) or 'sizes'}"
    total = {ph: sum(m.total(ph) for m in meters.values()) for ph in PHASES}
    rounds = {ph: max(m.rounds(ph) for m in meters.values()) for ph in PHASES}
    assert total["online"] > 0 and rounds["online"] >= 1, f"{spec.name}: no online traffic metered {total}"
    assert "online" in meters[spec.input_role].windows, "the output is not produced in the online phase"
    if EXPECT[spec.name]["offline"]:
        assert total["offline"] > 0, f"{spec.name}: declares preprocessing but meters no offline traffic"
    else:
        assert total["offline"] == 0, f"{spec.name}: offline traffic {total['offline']} not declared"
    assert sum(total.values()) == sum(m.total() for m in meters.values())
