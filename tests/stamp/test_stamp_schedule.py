"""Semi-honest STAMP at batch 1 (issue #23 W3, W4): the first device operation is evaluated by
p0, the party the client's input message goes to, so the other two parties' masked
components travel in the same round as the input; outputs stay equal to the oracle."""

import numpy as np
import pytest

from secinfer.arith.fixed import FX32
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

from test_stamp_models import run_model


def _rounds(res):
    return max(res[r].info["meter"]["phases"]["online"]["rounds"] for r in ("p0", "p1", "p2"))


@pytest.mark.slow
@pytest.mark.parametrize("workload,rounds", [("W3", 2), ("W4", 2)])
def test_batch1_rounds_and_exact_output(workload, rounds):
    """W3 with the owner-held results (option stamp_owner_split, default): the input and every
    masked component of p1 and p2 in round 1 (their parts of each product need nothing from
    the device steps), p0's masked output component 2 -- 2. Without: input 1, the first
    layer's result to the third party 1, the second layer (evaluated by that party) 1, the
    output step 1 -- 4 (5 when p1 evaluated the first layer). W4: input 1, result 1, and the
    output step rides with it -- 2 either way (was 4). (Without the option:
    ``test_owner_held.py``.)"""
    g = load_model(build_workload(workload))
    x = workload_input(workload, 1)
    res = run_model(g, x, "semi-honest")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    assert _rounds(res) == rounds


def test_input_shared_offline_exact():
    """With the input shared before the online phase (the schedule starts at p0's lead, as
    before): exact. Owner-held results: every masked component to p0's LTEE 1, p0's output
    component 2 (without them: layer 1 two rounds, layer 2 one more, the output step 1 -- 4)."""
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 1)
    res = run_model(g, x, "semi-honest", options={"input_phase": "offline"})
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    assert _rounds(res) == 2
