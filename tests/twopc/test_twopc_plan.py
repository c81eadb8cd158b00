"""The two-party plan template: compile -> JSON -> validated steps round-trips, residual
connections become two-input ``add`` steps that ``session.walk`` evaluates in order, and a
malformed plan from the server is a typed error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from secinfer.arith.fixed import FX64
from secinfer.errors import ProtocolError
from secinfer.ir import bundled, zoo
from secinfer.ir.float_exec import run_float_all, run_node_float
from secinfer.ir.onnx_import import load_model
from secinfer.protocols.twopc import session
from secinfer.protocols.twopc.plan import AddStep, LinearStep, compile_plan, encode_public, parse_plan

RESNET = load_model(zoo.build("resnet20", seed=0))


def _roundtrip(plan, **kw):
    return parse_plan(encode_public(plan.steps), "test", **kw)


def test_resnet_plan_round_trips_with_residual_adds():
    plan = compile_plan(RESNET, FX64, 2)
    steps = _roundtrip(plan)
    assert [s.to_json() for s in steps] == [s.to_json() for s in plan.steps]
    kinds = [s.op for s in steps]
    assert kinds.count("add") == 9 and kinds.count("lin") == 22 and kinds[0] == "input" and kinds[-1] == "output"
    adds = [s for s in steps if isinstance(s, AddStep)]
    assert all(len(s.inputs) == 2 and s.other_shape == s.in_shape for s in adds)
    lins = [i for i, s in enumerate(steps) if isinstance(s, LinearStep)]
    assert sorted(plan.weights) == lins                      # weights stay server-side, by step
    assert "w" not in json.dumps([s.to_json() for s in steps]).replace('"wbits"', "")


def test_walk_evaluates_the_plan_like_the_graph():
    """The steps carry all a party needs to evaluate the model (weights looked up by the
    server's own node), residual adds included: walking them equals the float executor."""
    x = np.random.default_rng(0).normal(size=(1, 3, 32, 32))
    plan = compile_plan(RESNET, FX64, 1)
    nodes = {n.name: n for n in RESNET.nodes}

    def run_step(i, st, *vals):
        node = nodes[st.name]
        weights = [np.asarray(RESNET.initializers[n]) for n in node.inputs if n in RESNET.initializers]
        return run_node_float(node, list(vals) + weights)[0]

    y = session.walk(plan.steps, {plan.steps[0].out: x}, run_step)
    ref = run_float_all(RESNET, x)[RESNET.output_names[0]]
    np.testing.assert_allclose(y, ref, rtol=1e-9, atol=1e-9)


def _tampered(mutate):
    plan = compile_plan(load_model(bundled.bundled_path("digits-cnn")), FX64, 1)
    items = [s.to_json() for s in plan.steps]
    mutate(items)
    return np.frombuffer(json.dumps(items).encode(), np.uint8)


@pytest.mark.parametrize("mutate", [
    lambda it: it[3].update(op="softmax"),                     # unknown kind
    lambda it: it[3].update(node_op="Relu"),                   # kind and op disagree
    lambda it: it[3].update(**{"in": "nowhere"}),              # reads a tensor never produced
    lambda it: it[3].update(in_shape=[1, 2, 3]),               # disagrees with its input
    lambda it: it[3].update(out_shape=[1 << 14, 1 << 14]),     # oversized
    lambda it: it[3].update(out_shape=[0, 3]),
    lambda it: it[1].update(wbits=99),                         # lin without a valid weight bound
    lambda it: it.pop(),                                       # no output step
    lambda it: it[-1].update(**{"in": it[1]["out"]}, in_shape=[1]),
], ids=["kind", "op", "dangling", "shape-mismatch", "oversized", "zero-dim", "wbits", "no-output", "bad-output"])
def test_malformed_plan_is_a_protocol_error(mutate):
    with pytest.raises(ProtocolError):
        parse_plan(_tampered(mutate), "test")


def test_undecodable_plan_and_notes_hook():
    with pytest.raises(ProtocolError, match="does not decode"):
        parse_plan(np.frombuffer(b"\xff[", np.uint8), "test")
    plan = compile_plan(load_model(bundled.bundled_path("digits-mlp")), FX64, 1, annotate=lambda st: {"k": st.size})
    raw = encode_public(plan.steps)

    def check(d, kind):
        if not isinstance(d.get("k"), int):
            raise ProtocolError("no k")
        return {"k": d["k"]}
    steps = parse_plan(raw, "test", check_notes=check)
    assert [s.notes["k"] for s in steps[1:-1]] == [s.size for s in plan.steps[1:-1]]
    with pytest.raises(ProtocolError, match="unknown plan step"):
        parse_plan(raw, "test", kinds=("relu",))
