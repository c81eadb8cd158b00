"""Sign / ReLU / ARS gates (plain and MAC twin, Z_2^n and lifted Z_2^(n+40)) against plaintext,
declared costs, key serialization and malformed keys."""

import numpy as np
import pytest
from fss_helpers import run_local_gate

from secinfer.arith.fixed import FX32, FX64
from secinfer.crypto.fss.gates import GateKey, make_gate, wire_dtype
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, SerializationError


def _signed(v, n):
    v = int(v) % (1 << n)
    return v - (1 << n) if v >> (n - 1) else v


def _inputs(prg, n, count):
    """Edge cases (0, -1, min, max, +-1 around them) followed by random elements of Z_2^n."""
    top = (1 << n) - 1
    edges = [0, top, 1 << (n - 1), (1 << (n - 1)) - 1, 1, top - 1, (1 << (n - 1)) + 1, (1 << (n - 1)) - 2]
    return np.concatenate([np.array(edges, np.uint64), prg.ring((count,), n)])


def _expected(kind, n, f, x):
    xs = [_signed(v, n) for v in x]
    return {"x": xs, "relu": [max(v, 0) for v in xs], "drelu": [int(v >= 0) for v in xs],
            "y": [v >> f for v in xs]}


CASES = [("sign", 8, 8, False, 0), ("sign", 64, 104, True, 0),
         ("relu", 8, 8, False, 0), ("relu", 8, 48, True, 0), ("relu", 32, 32, False, 0),
         ("relu", 32, 72, True, 0), ("relu", 64, 64, True, 0), ("relu", 64, 104, True, 0),
         ("ars", 8, 8, False, 3), ("ars", 32, 72, True, 13), ("ars", 64, 104, True, 13),
         ("ars", 64, 64, False, 16)]


@pytest.mark.parametrize("kind,n,k,mac,f", CASES)
def test_gate_matches_plaintext(kind, n, k, mac, f):
    prg = PRG.for_tests(hash((kind, n, k, mac, f)) & 0xFFFF)
    gate = make_gate(kind, n, k, mac=mac, frac_bits=f)
    x = np.arange(1 << n, dtype=np.uint64) if n == 8 else _inputs(prg, n, 400)
    mu = int(gate.group.to_int(gate.group.random(prg, ()))) if mac else None
    got = run_local_gate(gate, prg, x, mu)
    want = _expected(kind, n, f, x)
    mod = 1 << k
    for name in gate.outputs:
        base = want[name[3:] if name.startswith("mu_") else name]
        scale = mu if name.startswith("mu_") else 1
        assert [int(v) for v in got[name]] == [(scale * v) % mod for v in base], name


def test_ars_agrees_with_fixed_point_trunc():
    prg = PRG.for_tests(7)
    for cfg in (FX32, FX64):
        gate = make_gate("ars", cfg.ring_bits, frac_bits=cfg.frac_bits)
        x = _inputs(prg, cfg.ring_bits, 300)
        got = run_local_gate(gate, prg, x)["y"]
        want = cfg.trunc(x)
        assert [int(v) for v in got] == [int(v) for v in want]


@pytest.mark.parametrize("kind,n,k,mac,f", CASES)
def test_declared_key_size_equals_serialized(kind, n, k, mac, f):
    prg = PRG.for_tests(11)
    gate = make_gate(kind, n, k, mac=mac, frac_bits=f)
    mu = 12345 if mac else None
    k0, k1 = gate.gen(prg, 5, mac_key=mu)
    cost = gate.cost()
    assert k0.nbytes() == k1.nbytes() == 5 * cost.key_bytes
    assert cost.online_bits == n and cost.rounds == 1
    assert cost.online_wire_bytes == wire_dtype(n).itemsize
    frame = k0.to_bytes()
    assert len(frame) >= 5 * cost.key_bytes


def test_key_roundtrip_bytes_and_arrays():
    prg = PRG.for_tests(12)
    gate = make_gate("relu", 16, 56, mac=True)
    k0, k1 = gate.gen(prg, 9, mac_key=77)
    for key in (k0, k1):
        back = GateKey.from_bytes(key.to_bytes(), expect=gate, party=key.party)
        assert back.party == key.party and back.count == 9
        for name, arr in key.to_arrays().items():
            assert np.array_equal(back.to_arrays()[name], arr)
    # the round-tripped key still evaluates correctly
    x = prg.ring((9,), 16)
    xhat = (x + k0.shares["r"][:, 0] + k1.shares["r"][:, 0]) & np.uint64(0xFFFF)
    b0 = GateKey.from_bytes(k0.to_bytes())
    y = gate.group.add(gate.eval_local(b0, xhat)["relu"], gate.eval_local(k1, xhat)["relu"])
    assert [int(v) for v in gate.group.to_int(y)] == [max(_signed(v, 16), 0) for v in x]


def test_malformed_key_bytes_are_typed_errors():
    prg = PRG.for_tests(13)
    gate = make_gate("relu", 16, 56, mac=True)
    k0, _ = gate.gen(prg, 4, mac_key=3)
    data = k0.to_bytes()
    bad_inputs = [b"", b"garbage", data[:-1], data[:40], data + b"\x00",
                  data[:8] + bytes([255]) + data[9:],     # unknown gate kind in the header
                  bytes([99]) + data[1:],                 # unknown format version
                  data[:56] + (1 << 40).to_bytes(8, "little") + data[64:]]  # absurd count
    for bad in bad_inputs:
        with pytest.raises(SerializationError):
            GateKey.from_bytes(bad)
    with pytest.raises(SerializationError):
        GateKey.from_bytes(data, expect=make_gate("relu", 16, 56, mac=False))
    with pytest.raises(SerializationError):
        GateKey.from_bytes(data, party=1)
    arrays = k0.to_arrays()
    meta = arrays["meta"].copy()
    meta[1] = 99  # unknown gate kind
    for bad in (dict(arrays, meta=meta), dict(arrays, **{"sh.mu": arrays["sh.mu"][:2]}),
                {k: v for k, v in arrays.items() if k != "dcf0.v_cw"}, dict(arrays, extra=meta)):
        with pytest.raises(SerializationError):
            GateKey.from_arrays(bad)


def test_gate_parameter_validation():
    with pytest.raises(ConfigError):
        make_gate("relu", 1)
    with pytest.raises(ConfigError):
        make_gate("relu", 32, 16)
    with pytest.raises(ConfigError):
        make_gate("ars", 32, frac_bits=0)
    with pytest.raises(ConfigError):
        make_gate("relu", 32, frac_bits=3)
    with pytest.raises(ConfigError):
        make_gate("nope", 32)
    prg = PRG.for_tests(14)
    with pytest.raises(ConfigError):
        make_gate("relu", 32, 72, mac=True).gen(prg, 3)          # MAC gate without mu
    with pytest.raises(ConfigError):
        make_gate("relu", 32).gen(prg, 3, mac_key=5)             # plain gate with mu
    k0, _ = make_gate("relu", 32).gen(prg, 3)
    with pytest.raises(ConfigError):
        make_gate("relu", 32).eval_local(k0, np.zeros(4, np.uint64))   # wrong batch size
    with pytest.raises(ConfigError):
        make_gate("sign", 32).eval_local(k0, np.zeros(3, np.uint64))   # key of another gate
