"""DCF and DPF against the naive functions: every point of n = 8, random and boundary points
of large domains, declared key sizes, malformed keys."""

import numpy as np
import pytest

from secinfer.crypto.fss.dcf import DCFKeys, DCFParams, dcf_eval, dcf_gen
from secinfer.crypto.fss.dpf import DPFKeys, DPFParams, dpf_eval, dpf_eval_all, dpf_gen
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, SerializationError


def _reconstruct(g, y0, y1):
    return g.add(y0, y1)


@pytest.mark.parametrize("k,payload", [(1, 1), (8, 1), (64, 2), (104, 3)])
def test_dcf_every_point_n8(k, payload):
    prg = PRG.for_tests(100 + k)
    p = DCFParams(8, k, payload)
    g = p.group
    alpha = np.concatenate([np.array([0, 1, 255, 128], np.uint64), prg.ring((12,), 8)])
    beta = g.random(prg, (alpha.size, payload))
    k0, k1 = dcf_gen(p, prg, alpha, beta)
    xs = np.tile(np.arange(256, dtype=np.uint64), (alpha.size, 1))
    y = _reconstruct(g, dcf_eval(k0, xs), dcf_eval(k1, xs))
    want = np.where((xs < alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(y, want)
    # shares alone are not the function (sanity that party 1 really holds a share)
    assert not np.array_equal(dcf_eval(k0, xs), want)


@pytest.mark.parametrize("n,k", [(64, 64), (64, 104), (32, 72), (63, 8)])
def test_dcf_random_and_boundary_points_large_domain(n, k):
    prg = PRG.for_tests(200 + n + k)
    p = DCFParams(n, k, 2)
    g = p.group
    top = (1 << n) - 1
    alpha = np.concatenate([np.array([0, top, 1, 1 << (n - 1)], np.uint64), prg.ring((60,), n)])
    beta = g.random(prg, (alpha.size, 2))
    k0, k1 = dcf_gen(p, prg, alpha, beta)
    mask = np.uint64(top)
    pts = np.stack([alpha, (alpha - np.uint64(1)) & mask, (alpha + np.uint64(1)) & mask,
                    np.zeros_like(alpha), np.full_like(alpha, top), prg.ring((alpha.size,), n)], axis=1)
    y = _reconstruct(g, dcf_eval(k0, pts), dcf_eval(k1, pts))
    want = np.where((pts < alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(y, want)


@pytest.mark.parametrize("k,payload", [(8, 1), (104, 2)])
def test_dpf_every_point_n8_and_full_domain(k, payload):
    prg = PRG.for_tests(300 + k)
    p = DPFParams(8, k, payload)
    g = p.group
    alpha = np.concatenate([np.array([0, 255], np.uint64), prg.ring((8,), 8)])
    beta = g.random(prg, (alpha.size, payload))
    k0, k1 = dpf_gen(p, prg, alpha, beta)
    xs = np.tile(np.arange(256, dtype=np.uint64), (alpha.size, 1))
    want = np.where((xs == alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(g.add(dpf_eval(k0, xs), dpf_eval(k1, xs)), want)
    assert np.array_equal(g.add(dpf_eval_all(k0), dpf_eval_all(k1)), want)


def test_dpf_large_domain():
    prg = PRG.for_tests(301)
    p = DPFParams(64, 104, 1)
    g = p.group
    alpha = prg.ring((40,), 64)
    beta = g.random(prg, (40, 1))
    k0, k1 = dpf_gen(p, prg, alpha, beta)
    pts = np.stack([alpha, alpha ^ np.uint64(1), alpha ^ np.uint64(1 << 63), prg.ring((40,), 64)], axis=1)
    want = np.where((pts == alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(g.add(dpf_eval(k0, pts), dpf_eval(k1, pts)), want)


@pytest.mark.parametrize("n,k,payload", [(8, 8, 1), (31, 72, 6), (64, 104, 3)])
def test_key_sizes_equal_declared_formula(n, k, payload):
    prg = PRG.for_tests(400)
    for params, gen in ((DCFParams(n, k, payload), dcf_gen), (DPFParams(n, k, payload), dpf_gen)):
        keys = gen(params, prg, prg.ring((7,), n), params.group.random(prg, (7, payload)))
        entry = -(-k // 8) * payload          # payload entries packed to whole bytes
        for key in keys:
            assert key.nbytes() == 7 * params.nbytes_per_key()
        if isinstance(params, DPFParams):
            assert params.nbytes_per_key() == 16 + n * 17 + entry
        else:
            # control bits: 2 per level, four levels to a byte
            assert params.nbytes_per_key() == 16 + n * (16 + entry) + -(-2 * n // 8) + entry


def test_dcf_mixed_entry_widths():
    """Payload in Z_2^104 x Z_2^40 x Z_2^3: each coordinate correct mod its own width."""
    prg = PRG.for_tests(450)
    p = DCFParams(8, 104, 3, entry_bits=(104, 40, 3))
    g = p.group
    alpha = prg.ring((9,), 8)
    beta = p.reduce_entries(g.random(prg, (9, 3)))
    k0, k1 = dcf_gen(p, prg, alpha, beta)
    xs = np.tile(np.arange(256, dtype=np.uint64), (9, 1))
    y = p.reduce_entries(g.raw.add(dcf_eval(k0, xs), dcf_eval(k1, xs)))
    want = np.where((xs < alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(y, want)
    assert p.nbytes_per_key() == 16 + 8 * (16 + 13 + 5 + 1) + 2 + 19
    assert k0.nbytes() == 9 * p.nbytes_per_key()
    back = DCFKeys.from_arrays(p, 0, k0.arrays(), 9)
    assert np.array_equal(back.v_cw, k0.v_cw) and np.array_equal(back.final, k0.final)
    with pytest.raises(ConfigError):
        DCFParams(8, 64, 2, entry_bits=(64, 65))


def test_malformed_dcf_and_dpf_keys_are_typed_errors():
    prg = PRG.for_tests(500)
    p = DCFParams(16, 70, 1)
    k0, _ = dcf_gen(p, prg, prg.ring((4,), 16), p.group.random(prg, (4, 1)))
    arrays = k0.arrays()
    assert DCFKeys.from_arrays(p, 0, arrays, 4).count == 4
    bad_shape = dict(arrays, s_cw=arrays["s_cw"][:, :-1])
    bad_dtype = dict(arrays, seed=arrays["seed"].astype(np.int64))
    top = arrays["final"].copy()
    top[:, -1] |= np.uint8(0x80)          # bit 71 of a 70-bit entry
    unreduced = dict(arrays, final=top)
    vtop = arrays["v_cw"].copy()
    vtop[5, 2, -1] |= np.uint8(0x40)      # one level's correction word, bit 70 of a 70-bit entry
    unreduced_cw = dict(arrays, v_cw=vtop)
    missing = {k: v for k, v in arrays.items() if k != "v_cw"}
    for bad in (bad_shape, bad_dtype, unreduced, unreduced_cw, missing):
        with pytest.raises(SerializationError):
            DCFKeys.from_arrays(p, 0, bad, 4)
    with pytest.raises(SerializationError):
        DCFKeys.from_arrays(p, 2, arrays, 4)
    # control bits packed four levels to a byte: with n = 15 the last byte has 2 spare bits
    p15 = DCFParams(15, 70, 1)
    k15, _ = dcf_gen(p15, prg, prg.ring((4,), 15), p15.group.random(prg, (4, 1)))
    a15 = k15.arrays()
    assert a15["t_cw"].shape == (4, 4) and DCFKeys.from_arrays(p15, 0, a15, 4).count == 4
    spare = a15["t_cw"].copy()
    spare[-1, 1] |= np.uint8(0x40)
    with pytest.raises(SerializationError):
        DCFKeys.from_arrays(p15, 0, dict(a15, t_cw=spare), 4)
    q = DPFParams(16, 8, 1)
    d0, _ = dpf_gen(q, prg, prg.ring((4,), 16), q.group.random(prg, (4, 1)))
    with pytest.raises(SerializationError):
        DPFKeys.from_arrays(q, 0, dict(d0.arrays(), final=d0.final[:2]), 4)


def test_out_of_domain_inputs_rejected():
    prg = PRG.for_tests(600)
    p = DCFParams(8, 8, 1)
    with pytest.raises(ConfigError):
        dcf_gen(p, prg, np.array([256], np.uint64), p.group.zeros((1, 1)))
    k0, _ = dcf_gen(p, prg, np.array([3], np.uint64), p.group.zeros((1, 1)))
    with pytest.raises(ConfigError):
        dcf_eval(k0, np.array([300], np.uint64))
    with pytest.raises(ConfigError):
        DCFParams(65, 8)


def test_dcf_chunked_batches(monkeypatch):
    """Batches larger than the cache chunk are cut and re-joined without changing results."""
    from secinfer.crypto.fss import dcf as dcf_mod
    monkeypatch.setattr(dcf_mod, "CHUNK", 16)
    prg = PRG.for_tests(700)
    p = DCFParams(12, 72, 2)
    g = p.group
    alpha = prg.ring((53,), 12)
    beta = g.random(prg, (53, 2))
    k0, k1 = dcf_gen(p, prg, alpha, beta)
    assert k0.count == 53 and k0.nbytes() == 53 * p.nbytes_per_key()
    pts = np.stack([alpha, (alpha - np.uint64(1)) & np.uint64(0xFFF), prg.ring((53,), 12)], axis=1)
    want = np.where((pts < alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(g.add(dcf_eval(k0, pts), dcf_eval(k1, pts)), want)
    y = g.add(dcf_eval(k0, pts[:, 2]), dcf_eval(k1, pts[:, 2]))
    assert np.array_equal(y, want[:, 2])
