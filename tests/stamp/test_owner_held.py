"""Semi-honest STAMP, results held by the model owner (issue #23 item 4; option
``stamp_owner_split``, ``StampBackend._plan_held``): an unsplit device step whose result only
products with a weight take is evaluated by p0's LTEE, the real component stays at p0, and the
next product's nine terms are split so that p1's and p2's parts need nothing from the step.
Outputs equal the oracle bit for bit; the step-5 messages of those steps are gone."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from secinfer.arith.fixed import FX32
from secinfer.arith import public_rng
from secinfer.bench.peers_suite import build_workload, workload_input
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

from test_stamp_models import run_model


def _online(res, key):
    return [res[r].info["meter"]["phases"]["online"][key] for r in ("p0", "p1", "p2")]


def _conv_net(residual: bool):
    """conv 3x3 (1->4) + ReLU, conv 3x3 (4->4) + ReLU, [Add of the first ReLU's centre crop
    when ``residual``: its result then feeds a non-product too], max pool 2, flatten, FC 10."""
    rng = public_rng("tests/stamp/owner-held", 3)

    def init(nm, arr):
        return numpy_helper.from_array(np.asarray(arr, np.float32), nm)

    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 10, 10])
    inits = [init("w1", rng.normal(0, 0.4, (4, 1, 3, 3))), init("b1", rng.normal(0, 0.05, (4,))),
             init("w2", rng.normal(0, 0.3, (4, 4, 3, 3))), init("b2", rng.normal(0, 0.05, (4,))),
             init("fw", rng.normal(0, 0.2, (64, 10))), init("fb", rng.normal(0, 0.05, (10,)))]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1] if residual else [0, 0, 0, 0]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2")]
    last = "r2"
    if residual:   # r1 feeds conv2 and this Add: not held
        nodes.append(helper.make_node("Add", ["r2", "r1"], ["s"], name="add"))
        last = "s"
    side = 4 if residual else 3
    inits[4] = init("fw", rng.normal(0, 0.2, (4 * side * side, 10)))
    nodes += [helper.make_node("MaxPool", [last], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["output"], name="fc")]
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 10])
    graph = helper.make_graph(nodes, "owner-held", [x], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return load_model(model)


def _z_bytes(res):
    """Online payload of the step-5 messages (an evaluator's real component to the third party)."""
    return sum(v[0] for r in ("p0", "p1", "p2") for k, v in res[r].info["meter"]["by_tag"].items()
               if k.startswith("online|sent|") and k.endswith("|stamp/z"))


def _evals(res):
    return [res[r].info["bus"]["by_kind"].get("eval", [0, 0, 0])[2] for r in ("p0", "p1", "p2")]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["W3", "W4"])
def test_held_results_exact_fewer_messages(workload):
    """W3 and W4 at batch 1: equal to the oracle and to the run without the option; the
    step-5 message of every held step is not sent (W3: two of 128 elements, W4: one of
    2304) and nothing else changes in size; p0's LTEE evaluates every hidden layer, p2's
    LTEE is not called online. Rounds: W3 2 (without: 4 -- input 1, the first layer's result
    to the third party 1, the second layer evaluated there 1, the output step 1), W4 2."""
    g = load_model(build_workload(workload))
    x = workload_input(workload, 1)
    ref = run_fixed(g, x, FX32)
    # (the components sent ahead, ``test_send_ahead``, apart: here only the held steps change)
    new = run_model(g, x, "semi-honest", options={"stamp_send_ahead": False})
    old = run_model(g, x, "semi-honest", options={"stamp_owner_split": False, "stamp_send_ahead": False})
    assert np.array_equal(new["p1"].output_ring, ref)
    assert np.array_equal(old["p1"].output_ring, ref)
    held = {"W3": 2 * 128, "W4": 16 * 12 * 12}[workload]
    assert _z_bytes(new) == 0 and _z_bytes(old) == 4 * held
    assert sum(_online(old, "sent_payload")) - sum(_online(new, "sent_payload")) == 4 * held
    assert _evals(new) == [{"W3": 2, "W4": 1}[workload], 0, 0]
    assert new["p2"].info["bus"]["online_transactions"] == 0
    assert (max(_online(new, "rounds")), max(_online(old, "rounds"))) == {"W3": (2, 4), "W4": (2, 2)}[workload]


@pytest.mark.parametrize("residual", [False, True])
def test_held_convolutions_exact(residual):
    """A conv -> conv network at batch 1: the first conv's result is held and the second
    conv's terms split (a convolution's stacked weight halved along the input channels);
    with a residual Add of that result it is not held (the Add needs the real component at
    every holder), the pooled result the FC takes still is. Both equal the oracle."""
    g = _conv_net(residual)
    x = public_rng("tests/stamp/owner-held/x", 1).uniform(-1, 1, (1, 1, 10, 10))
    res = run_model(g, x, "semi-honest")
    assert np.array_equal(res["p1"].output_ring, run_fixed(g, x, FX32))
    # with the Add, conv1's and conv2's results (4 x 8 x 8 each) go to the third party (the
    # Add takes them); the pooled result (after the Add) is held either way
    assert _z_bytes(res) == (2 * 4 * 4 * 8 * 8 if residual else 0)


def test_batches_held_only_on_request():
    """At batch 4 the device steps are split across the three LTEEs [STAMP 4.2]: nothing is
    held by default (each LTEE evaluates, every step-5 message is sent, 6 rounds). Option
    ``stamp_owner_split="all"`` holds batches too: p0's LTEE evaluates every row of the
    hidden layers, 2 rounds, no step-5 message. Both exact."""
    g = load_model(build_workload("W3"))
    x = workload_input("W3", 4)
    ref = run_fixed(g.with_batch(4), x, FX32)
    split = run_model(g, x, "semi-honest")
    held = run_model(g, x, "semi-honest", options={"stamp_owner_split": "all"})
    assert np.array_equal(split["p1"].output_ring, ref)
    assert np.array_equal(held["p1"].output_ring, ref)
    assert max(_online(split, "rounds")) == 6 and all(e > 0 for e in _evals(split)) and _z_bytes(split) > 0
    assert max(_online(held, "rounds")) == 2 and _evals(held) == [2, 0, 0] and _z_bytes(held) == 0


def test_a_bad_option_value_is_a_typed_error():
    from secinfer.errors import ProtocolError

    g = load_model(build_workload("W3"))
    with pytest.raises(ProtocolError, match="stamp_owner_split"):
        run_model(g, workload_input("W3", 1), "semi-honest", options={"stamp_owner_split": "yes"})
