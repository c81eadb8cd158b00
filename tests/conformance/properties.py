"""The properties the conformance suite asserts of one in-process run (harness.Run).

Each raises AssertionError naming what is wrong; test_conformance.py applies them to every
case, test_conformance_selftest.py to deliberately broken runs (so each can fail).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from secinfer.ir import bundled
from secinfer.ir.fixed_exec import derived_error_bound, run_fixed

from .expectations import EXPECT

PHASES = ("setup", "offline", "online")


def finished(run) -> None:
    failed = {role: v for role, v in run.results.items() if isinstance(v, BaseException)}
    if failed:
        raise next(iter(failed.values()))


def output_within_budget(run) -> None:
    """(a) the input role's output against run_fixed, within the protocol's declared budget."""
    spec, cfg = run.spec, run.cfg
    res = run.results[spec.input_role]
    if EXPECT[spec.name]["budget"] == "own-oracle":
        # the protocol computes another model than the fixed-point graph (SAFHIRE: the
        # quantized integer model), and equals that model's clear execution exactly
        assert spec.oracle is not None, f"{spec.name}: budget own-oracle without ProtocolSpec.oracle"
        assert res.output is not None, f"{spec.name}: no output at {spec.input_role}"
        want = np.asarray(spec.oracle(run.graph, run.x, {}), dtype=np.float64)
        out = np.asarray(res.output, dtype=np.float64).reshape(want.shape)
        assert np.array_equal(out, want), f"{spec.name}: {np.count_nonzero(out != want)} elements differ from its oracle"
        return
    ref = run_fixed(run.graph, run.x, cfg)
    assert res.output is not None and res.output_ring is not None, f"{spec.name}: no output at {spec.input_role}"
    out = np.asarray(res.output, dtype=np.float64)
    ring = np.asarray(res.output_ring)
    assert ring.shape == ref.shape and out.shape == ref.shape, (ring.shape, out.shape, ref.shape)
    budget = EXPECT[spec.name]["budget"]
    if budget == "exact":
        assert np.array_equal(ring, ref), f"{spec.name}: {np.count_nonzero(ring != ref)} elements differ"
        assert np.array_equal(out, cfg.decode(ref)), f"{spec.name}: the float output is not the ring output decoded"
    elif budget == "derived":
        tol = 2 * derived_error_bound(run.graph, cfg, x=run.x)["bound"]
        err = float(np.max(np.abs(out - cfg.decode(ref))))
        assert err <= tol, f"{spec.name}: max error {err} over the budget {tol}"
    else:
        kind, units = budget
        assert kind == "units", budget
        diff = np.abs(cfg.ring.to_signed(cfg.ring.sub(ring, ref)))
        assert int(diff.max()) < units, f"{spec.name}: {int(diff.max())} units off (budget < {units})"
        n = len(run.x)
        model = run.case.model
        assert np.array_equal(bundled.predict_from_output(model, out.reshape(n, -1)),
                              bundled.predict_from_output(model, cfg.decode(ref).reshape(n, -1))), \
            f"{spec.name}: predictions differ from the oracle's"


def only_input_role_learns_output(run) -> None:
    """(b) only ``input_role`` gets an output; every other role returns none."""
    spec = run.spec
    assert run.results[spec.input_role].output is not None
    for role, res in run.results.items():
        if role != spec.input_role:
            assert res is None or (res.output is None and res.output_ring is None), \
                f"{spec.name}: role {role} returned an output"


def phases_metered(run) -> None:
    """(c) every message counted by sender and receiver in the same phase with the same size;
    online traffic and rounds; offline traffic exactly when the protocol declares it."""
    spec, meters = run.spec, run.meters
    assert set(meters) == set(spec.roles), f"{spec.name}: meters of {set(meters)}"
    sent, recv = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0])
    for role, m in meters.items():
        for (ph, d, peer, tag), c in m.counters.items():
            if tag.startswith("__"):
                continue
            key = (ph, role, peer, tag) if d == "sent" else (ph, peer, role, tag)
            tgt = sent if d == "sent" else recv
            tgt[key][0] += c.payload
            tgt[key][1] += c.messages
    odd = sorted(k for k in set(sent) | set(recv) if sent.get(k) != recv.get(k))
    assert not odd, f"{spec.name}: metered differently at the two ends (phase, from, to, tag): {odd[:5]}"
    total = {ph: sum(m.total(ph) for m in meters.values()) for ph in PHASES}
    rounds = {ph: max(m.rounds(ph) for m in meters.values()) for ph in PHASES}
    assert total["online"] > 0 and rounds["online"] >= 1, f"{spec.name}: no online traffic metered {total}"
    assert "online" in meters[spec.input_role].windows, "the output is not produced in the online phase"
    if EXPECT[spec.name]["offline"]:
        assert total["offline"] > 0, f"{spec.name}: declares preprocessing but meters no offline traffic"
    else:
        assert total["offline"] == 0, f"{spec.name}: offline traffic {total['offline']} not declared"
