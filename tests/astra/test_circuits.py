"""General circuit evaluation with ASTRA over Z_2 (AES-128) and over Z_2^64 [ASTRA 4, 6.1.1]."""

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from astra_helpers import rounds, run_servers, traffic
from secinfer.arith.ring import RING64
from secinfer.crypto.gc.aes import aes128_circuit
from secinfer.crypto.gc.circuit import Builder, eval_plain
from secinfer.protocols.astra.circuits import circuit_stats, eval_offline, eval_online


def _bits(bs: bytes) -> np.ndarray:
    return np.unpackbits(np.frombuffer(bs, np.uint8), bitorder="little")[None, :].astype(np.uint64)


def _run_circuit(security, circ, owners, values, bits):
    def body(eng):
        with eng.ep.phase("offline"):
            sh = {k: eng.share_offline(owners[k], values[k].shape, k) for k in values}
            st = eval_offline(eng, circ, {k: v[0] for k, v in sh.items()})
        with eng.ep.phase("online"):
            ins = {k: eng.share_online(owners[k], sh[k][0], k, values[k] if eng.role == owners[k] else None,
                                       sh[k][1]) for k in values}
            out = eval_online(eng, circ, ins, st)
        with eng.ep.phase("setup"):
            return eng.open_all(out, "out")
    return run_servers(security, body, bits=bits)


@pytest.mark.parametrize("security", ["semi-honest", "malicious"])
def test_aes128_over_z2(security):
    circ = aes128_circuit()
    key, pt = bytes(range(16)), bytes(range(16, 32))
    want = Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(pt)
    assert np.packbits(eval_plain(circ, {"key": _bits(key), "pt": _bits(pt)})[0].astype(np.uint8),
                       bitorder="little").tobytes() == want
    # P1 shares its input before receiving P0's, so input sharing is a single round
    res, meters = _run_circuit(security, circ, {"key": "p0", "pt": "p1"}, {"pt": _bits(pt), "key": _bits(key)}, 1)
    got = np.packbits(res["p2"][0].astype(np.uint8), bitorder="little").tobytes()
    assert got == want
    st = circuit_stats(circ)
    # online: 2 bits (semi-honest) / 4 bits (malicious) per AND gate [ASTRA Thm. 4.2, 4.4], plus the inputs
    per_and = 2 if security == "semi-honest" else 4
    inputs = 8 * (2 * 16 + 16)      # P0 sends m_key to P1 and P2, P1 sends m_pt to P2 (packed)
    assert traffic(meters, "online") == per_and * st["and_gates"] + inputs
    # one round per AND level (multiplicative depth) + input sharing (+ verify)
    assert rounds(meters, "online") == st["and_depth"] + 1 + (1 if security == "malicious" else 0)


def test_arithmetic_circuit_over_ring():
    b = Builder()
    x, y, z = b.input("x", 1), b.input("y", 1), b.input("z", 1)
    t = b.and_(x[0], y[0])              # over Z_2^64: XOR = +, AND = *
    u = b.and_(t, b.xor(z[0], x[0]))
    circ = b.build([b.xor(u, t)])
    rng = np.random.default_rng(1)
    vals = {k: rng.integers(0, 2**63, (4, 1), dtype=np.uint64) for k in "xyz"}
    res, meters = _run_circuit("malicious", circ, {"x": "p0", "y": "p1", "z": "p2"}, vals, 64)
    x_, y_, z_ = (vals[k][:, 0] for k in "xyz")
    t_ = RING64.mul(x_, y_)
    assert np.array_equal(res["p1"][:, 0], RING64.add(RING64.mul(t_, RING64.add(z_, x_)), t_))
    assert circuit_stats(circ)["and_depth"] == 2
