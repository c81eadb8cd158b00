import hashlib

import numpy as np
import pytest

from secinfer.arith.ring import Ring
from secinfer.crypto.gc import garble as gcm
from secinfer.crypto.gc.circuit import bits_of, eval_plain, msb_add3_circuit, msb_sub3_circuit, msb_sub_circuit
from secinfer.crypto.prg import PRG
from secinfer.sharing.astra import deal, reconstruct


@pytest.mark.parametrize("bits", [64, 32, 1])
def test_astra_sharing_linearity(bits):
    prg = PRG.for_tests(1)
    r = Ring(bits)
    x, y = prg.ring((50,), bits), prg.ring((50,), bits)
    sx, sy = deal(x, bits, prg), deal(y, bits, prg)
    assert np.array_equal(reconstruct(sx), x)
    z = {p: (sx[p] + sy[p]).scale(3).add_public(5) for p in sx}
    assert np.array_equal(reconstruct(z), r.add(r.mul(r.add(x, y), 3), 5))
    # P0 never holds m; each evaluator misses one mask share
    assert z["p0"].m is None and z["p1"].l2 is None and z["p2"].l1 is None


def test_msb_circuits_plain():
    rng = np.random.default_rng(0)
    u = [rng.integers(0, 2**63, 300, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 300, dtype=np.uint64)
         for _ in range(3)]
    r = rng.integers(0, 2, (300, 1)).astype(np.uint8)
    sh = np.uint64(63)
    out = eval_plain(msb_sub_circuit(64), {"u1": bits_of(u[0], 64), "u2": bits_of(u[1], 64), "u3": r})[:, 0]
    assert np.array_equal(out, ((u[0] - u[1]) >> sh).astype(np.uint8) ^ r[:, 0])
    out = eval_plain(msb_sub3_circuit(64), {"u1": bits_of(u[0], 64), "u2": bits_of(u[1], 64),
                                            "u3": bits_of(u[2], 64), "u4": r, "u5": r})[:, 0]
    assert np.array_equal(out, ((u[0] - u[1] - u[2]) >> sh).astype(np.uint8))
    out = eval_plain(msb_add3_circuit(64), {"x0": bits_of(u[0], 64), "x1": bits_of(u[1], 64),
                                            "x2": bits_of(u[2], 64)})[:, 0]
    assert np.array_equal(out, ((u[0] + u[1] + u[2]) >> sh).astype(np.uint8))
    c = msb_sub_circuit(64)
    assert c.and_count <= 3 * 64 and c.and_depth <= 8   # ~2l ANDs, log(l)+1 depth [ASTRA 5.4]


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "native"])
def test_half_gates_garbling_and_authenticity(native):
    prg = PRG.for_tests(2)
    circ = msb_sub_circuit(64)
    n = 40
    u1, u2 = prg.uint64((n,)), prg.uint64((n,))
    r = prg.bits((n, 1))
    R, zeros = gcm.input_labels(circ, n, prg.uint64)
    g = gcm.garble(circ, R, zeros, native=native)
    act = {"u1": gcm.select(zeros["u1"], bits_of(u1, 64), R), "u2": gcm.select(zeros["u2"], bits_of(u2, 64), R),
           "u3": gcm.select(zeros["u3"], r, R)}
    out = gcm.evaluate(circ, g.tables, act, native=native)
    y = gcm.decode(out, g.decode)[:, 0]
    assert np.array_equal(y, ((u1 - u2) >> np.uint64(63)).astype(np.uint8) ^ r[:, 0])
    # the evaluator's output label is exactly the garbler's label for y (authenticity)
    assert np.array_equal(out[:, 0], gcm.select(g.out_zero[:, 0], y, R))
    # a tampered table changes the output label into garbage (not the other valid label)
    bad = g.tables.copy()
    bad[:, -1, 0, 0] ^= np.uint64(1 << 40)
    out2 = gcm.evaluate(circ, bad, act, native=native)
    other = gcm.select(g.out_zero[:, 0], y ^ 1, R)
    assert not np.any(np.all(out2[:, 0] == other, axis=-1))


@pytest.mark.parametrize("n", [5, 37])   # the kernel walks 16 instances at a time, 8 AES blocks per call
@pytest.mark.parametrize("make", [msb_sub_circuit, msb_sub3_circuit, msb_add3_circuit])
def test_native_garbling_equals_the_numpy_reference(make, n):
    """The native kernel (native/go/gc/gc.go) against the numpy code: the same tables, output
    labels and evaluation for every instance of a batch (tweaks depend on the instance)."""
    assert gcm._native_lib() is not None, "the native library must be built (make install)"
    prg = PRG.for_tests(7)
    circ = make(64)
    R, zeros = gcm.input_labels(circ, n, prg.uint64)
    g0, g1 = gcm.garble(circ, R, zeros, native=False), gcm.garble(circ, R, zeros, native=True)
    assert np.array_equal(g0.tables, g1.tables) and np.array_equal(g0.out_zero, g1.out_zero)
    act = {k: gcm.select(z, prg.bits(z.shape[:2]), R) for k, z in zeros.items()}
    assert np.array_equal(gcm.evaluate(circ, g0.tables, act, native=False),
                          gcm.evaluate(circ, g0.tables, act, native=True))
    tampered = g0.tables.copy()
    tampered[2, 17, 1, 1] ^= np.uint64(1)
    assert np.array_equal(gcm.evaluate(circ, tampered, act, native=False),
                          gcm.evaluate(circ, tampered, act, native=True))


def test_native_label_hash_equals_hashlib():
    labels = np.random.default_rng(5).integers(0, 2**63, (3, 64, 2), dtype=np.uint64)
    raw = labels.tobytes()
    want = b"".join(hashlib.sha256(b"gc-com" + raw[i:i + 16]).digest() for i in range(0, len(raw), 16))
    assert gcm.label_hash(labels, native=True).tobytes() == want
    assert gcm.label_hash(labels, native=False).tobytes() == want
    flipped = labels.copy()
    flipped[1, 7, 0] ^= np.uint64(1)
    assert gcm.label_hash(flipped).tobytes() != want


def test_native_gc_rejects_a_bad_program():
    from secinfer.crypto.he.errors import HEArgumentError

    circ = msb_sub_circuit(8)
    R, zeros = gcm.input_labels(circ, 1, PRG.for_tests(3).uint64)
    g = gcm.garble(circ, R, zeros, native=True)
    prog = gcm._program(circ).copy()
    prog[-1, 3] = circ.n_wires            # an output wire past the end
    circ.__dict__["_gc_program"] = prog
    try:
        with pytest.raises(HEArgumentError, match="out of range"):
            gcm.evaluate(circ, g.tables, zeros, native=True)
    finally:
        del circ.__dict__["_gc_program"]


@pytest.mark.parametrize("native", [False, True], ids=["numpy", "native"])
def test_evaluate_opened_checks_commitments_then_evaluates(native):
    """The evaluator's fused online step: the opened labels of u1 are checked against the
    garbler's commitments at the bits of the value, then the circuit is evaluated; a label
    that is not the committed one for its bit (or for the other bit) is refused."""
    prg = PRG.for_tests(11)
    circ = msb_sub3_circuit(64)
    n = 3
    R, zeros = gcm.input_labels(circ, n, prg.uint64)
    g = gcm.garble(circ, R, zeros)
    vals = {k: prg.uint64((n,)) for k in ("u1", "u2", "u3")}
    bits = {k: bits_of(v, 64) for k, v in vals.items()}
    r = prg.bits((n, 1))
    act = {"u1": gcm.select(zeros["u1"], bits["u1"], R), "u2": gcm.select(zeros["u2"], bits["u2"], R),
           "u3": gcm.select(zeros["u3"], bits["u3"], R), "u4": gcm.select(zeros["u4"], r, R),
           "u5": gcm.select(zeros["u5"], r, R)}
    coms = gcm.commit_labels(zeros["u1"], R)
    want = gcm.evaluate(circ, g.tables, act, native=False)
    others = {k: v for k, v in act.items() if k != "u1"}
    out = gcm.evaluate_opened(circ, g.tables, gcm.wire_buffer(circ, others), "u1", act["u1"], coms, vals["u1"],
                              native=native)
    assert np.array_equal(out, want)
    y = gcm.decode(out, g.decode)[:, 0]
    assert np.array_equal(y, ((vals["u1"] - vals["u2"] - vals["u3"]) >> np.uint64(63)).astype(np.uint8))
    assert np.array_equal(gcm.evaluate_opened(circ, g.tables, gcm.wire_buffer(circ, others), "u1", act["u1"],
                                              native=native), want)       # no commitment check
    for flip in ("label", "value"):
        lab, v = act["u1"].copy(), vals["u1"].copy()
        if flip == "label":
            lab[1, 37, 1] ^= np.uint64(1 << 9)          # not a label of that wire at all
        else:
            v[2] ^= np.uint64(1 << 5)                   # the label of the other bit
        assert gcm.evaluate_opened(circ, g.tables, gcm.wire_buffer(circ, others), "u1", lab, coms, v,
                                   native=native) is None


def test_output_label_hashes_use_their_own_prefix():
    from secinfer.protocols.astra.bitext import _out_label_hashes

    labels = np.random.default_rng(6).integers(0, 2**63, (4, 2), dtype=np.uint64)
    raw = labels.tobytes()
    want = b"".join(hashlib.sha256(b"gc-out" + raw[i:i + 16]).digest() for i in range(0, len(raw), 16))
    assert _out_label_hashes(labels).tobytes() == want
    assert gcm.label_hash(labels, native=False, prefix=b"gc-out").tobytes() == want
