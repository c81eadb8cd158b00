"""Coefficient-domain RLWE, LWE extraction / linear combination / packing, encryption with
visible randomness, flooding and noise measurement."""

import numpy as np
import pytest

from secinfer.crypto import he

SCALE = 2.0 ** 30


@pytest.fixture(scope="module")
def pack_ev(P, kp):
    keys = P.gen_eval_keys(kp.sk, relin=False, pack=True, expand=True)
    e = he.Evaluator(P, keys)
    yield e
    e.close()
    keys.close()


def test_coefficient_encrypt_decrypt_exact(P, kp, rng):
    v = rng.integers(-2**20, 2**20, P.n)
    for key in (kp.pk, kp.sk):
        for level in (0, P.max_level):
            ct = he.coeff_encrypt(P, v, key, SCALE, level=level)
            assert ct.level == level
            got = he.coeff_decrypt(P, ct, kp.sk, SCALE)
            assert np.array_equal(np.round(got).astype(np.int64), v)


def test_extract_lincomb_exact(P, kp, rng):
    v = rng.integers(-1000, 1000, P.n)
    ct = he.coeff_encrypt(P, v, kp.pk, SCALE)
    idx = rng.choice(P.n, 40, replace=False)
    lwe = he.extract_lwe(P, ct, idx)
    assert len(lwe) == 40 and lwe.level == 0
    assert np.array_equal(np.round(he.lwe_decrypt(P, lwe, kp.sk, SCALE)), v[idx])
    W = rng.integers(-8, 9, (7, 40))
    comb = lwe.lincomb(W)
    assert np.array_equal(np.round(he.lwe_decrypt(P, comb, kp.sk, SCALE)), W @ v[idx])
    perm = rng.permutation(40)
    shuf = lwe.select(perm)
    assert np.array_equal(np.round(he.lwe_decrypt(P, shuf, kp.sk, SCALE)), v[idx][perm])
    with pytest.raises(he.HEArgumentError):
        lwe.lincomb(np.ones((2, 39), dtype=int))
    with pytest.raises(he.HEArgumentError):
        lwe.lincomb(np.full((1, 40), 0.5))


def test_lwe_arrays_satisfy_decryption_equation(P, kp, rng):
    # b + <a, s> = m*scale + e (mod q_0), checked with independent integer arithmetic.
    v = rng.integers(-50, 50, P.n)
    ct = he.coeff_encrypt(P, v, kp.sk, SCALE)
    lwe = he.extract_lwe(P, ct, [0, 5, P.n - 1])
    b, a = lwe.to_arrays()
    s = P._poly(kp.sk, 0)[0].astype(object)
    q = P.q[0]
    s = np.where(s > q // 2, s - q, s)
    for t, i in enumerate([0, 5, P.n - 1]):
        phase = (int(b[t, 0]) + int(np.dot(a[t, 0].astype(object), s))) % q
        phase = phase - q if phase > q // 2 else phase
        assert abs(phase - v[i] * SCALE) < 2 ** 12
    again = he.lwe_from_arrays(P, b, a)
    assert np.array_equal(np.round(he.lwe_decrypt(P, again, kp.sk, SCALE)), v[[0, 5, P.n - 1]])
    bad = a.copy()
    bad[0, 0, 0] = q
    with pytest.raises(he.HESerializationError):
        he.lwe_from_arrays(P, b, bad)


@pytest.mark.slow
@pytest.mark.parametrize("count,layout", [(1, "spread"), (16, "spread"), (100, "spread"),
                                          (12, "contiguous"), (P_N := 2048, "spread")])
def test_extract_then_pack_roundtrip_exact(P, kp, pack_ev, rng, count, layout):
    v = rng.integers(-2000, 2000, P.n)
    ct = he.coeff_encrypt(P, v, kp.pk, SCALE)
    idx = rng.choice(P.n, count, replace=False)
    lwe = he.extract_lwe(P, ct, idx)
    pos = he.spread_positions(count, P.n) if layout == "spread" else np.arange(count)
    packed = he.pack_lwe(pack_ev, lwe, pos)
    dec = he.coeff_decrypt(P, packed, kp.sk, SCALE)
    assert np.array_equal(np.round(dec[pos]).astype(np.int64), v[idx])
    rest = np.ones(P.n, bool)
    rest[pos] = False
    assert np.all(np.round(dec[rest]) == 0)
    std, mx = he.noise(P, packed, kp.sk)
    err = np.abs(dec[pos] - v[idx]).max() * SCALE
    print(f"\n[he] pack {count} ({layout}): max error 2^{np.log2(max(err, 1)):.1f} at scale 2^30")
    assert err < SCALE / 4


def test_pack_after_lincomb_and_shuffle(P, kp, pack_ev, rng):
    # The hybrid layer: extract -> small-integer linear layer -> shuffle -> pack.  [SAFHIRE Fig. 3]
    v = rng.integers(-100, 100, P.n)
    ct = he.coeff_encrypt(P, v, kp.pk, SCALE)
    lwe = he.extract_lwe(P, ct, np.arange(64))
    W = rng.integers(-4, 5, (32, 64))
    perm = rng.permutation(32)
    out = he.pack_lwe(pack_ev, lwe.lincomb(W).select(perm))
    dec = he.coeff_decrypt(P, out, kp.sk, SCALE)
    assert np.array_equal(np.round(dec[he.spread_positions(32, P.n)]), (W @ v[:64])[perm])


def test_pack_needs_keys_and_positions(P, kp, ev, pack_ev):
    ct = he.coeff_encrypt(P, np.arange(8), kp.pk, SCALE)
    lwe = he.extract_lwe(P, ct, range(4))
    with pytest.raises(he.HEArgumentError, match="Galois"):
        he.pack_lwe(ev, lwe)
    with pytest.raises(he.HEArgumentError):
        he.pack_lwe(pack_ev, lwe, [0, 0, 1, 2])
    with pytest.raises(he.HEArgumentError):
        he.pack_lwe(pack_ev, lwe, [0, 1])
    with pytest.raises(he.HEArgumentError):
        he.extract_lwe(P, ct, [P.n])


def test_expand_and_trace(P, kp, pack_ev, rng):
    v = rng.integers(-500, 500, P.n)
    ct = he.coeff_encrypt(P, v, kp.pk, SCALE)
    parts = he.expand(pack_ev, ct, log_gap=P.log_n - 3)  # 8 outputs
    assert sorted(parts) == [i * (P.n // 8) for i in range(8)]
    for i, c in parts.items():
        d = he.coeff_decrypt(P, c, kp.sk, SCALE)
        assert round(d[0]) == v[i]
    tkeys = P.gen_eval_keys(kp.sk, relin=False, trace_to=0)
    with he.Evaluator(P, tkeys) as tev:
        tr = he.trace(tev, ct, 0)
    d = he.coeff_decrypt(P, tr, kp.sk, SCALE)
    assert round(d[0]) == v[0]  # Lattigo normalises the trace by 1/N
    assert np.all(np.abs(d[1:]) < 1)


def _negacyclic_mul_mod(a, b, q):
    """Independent schoolbook a*b mod (X^N + 1, q) with Python integers, b small."""
    n = len(a)
    out = np.zeros(n, dtype=object)
    a = a.astype(object)
    for j in np.nonzero(b)[0]:
        sh = np.roll(a, j)
        sh[:j] = -sh[:j]
        out = out + int(b[j]) * sh
    return out % q


def test_encryption_with_randomness_satisfies_equation(kp, rng):
    P10 = he.get_params("ckks-n10-insecure")
    pair = P10.keygen()
    x = rng.uniform(-1, 1, 8)
    pt = P10.encode(x, level=1)
    ct, r = he.encrypt_with_randomness(P10, pt, pair.pk, seed=b"\x01" * 32)
    assert set(np.unique(r.u)) <= {-1, 0, 1}
    assert np.abs(r.e0).max() <= 20 and np.abs(r.e1).max() <= 20 and np.any(r.e0 != 0)
    m = pt.poly(0)
    pk0, pk1 = pair.pk.poly(0), pair.pk.poly(1)
    c0, c1 = ct.poly(0), ct.poly(1)
    assert c0.shape == (2, P10.n)
    for lvl in range(2):
        q = P10.q[lvl]
        e0 = np.array([int(v) % q for v in r.e0], dtype=object)
        e1 = np.array([int(v) % q for v in r.e1], dtype=object)
        want0 = (_negacyclic_mul_mod(pk0[lvl], r.u, q) + e0 + m[lvl].astype(object)) % q
        want1 = (_negacyclic_mul_mod(pk1[lvl], r.u, q) + e1) % q
        assert np.array_equal(want0, c0[lvl].astype(object))
        assert np.array_equal(want1, c1[lvl].astype(object))
    assert np.abs(P10.decrypt_decode(ct, pair.sk)[:8] - x).max() < 1e-6
    # Given randomness reproduces the same ciphertext; the same seed too.
    ct2, _ = he.encrypt_with_randomness(P10, pt, pair.pk, randomness=r)
    assert np.array_equal(ct2.poly(0), c0) and np.array_equal(ct2.poly(1), c1)
    ct3, r3 = he.encrypt_with_randomness(P10, pt, pair.pk, seed=b"\x01" * 32)
    assert np.array_equal(r3.u, r.u) and np.array_equal(ct3.poly(0), c0)
    bad = he.EncryptionRandomness(r.u * 2, r.e0, r.e1)
    with pytest.raises(he.HEArgumentError):
        he.encrypt_with_randomness(P10, pt, pair.pk, randomness=bad)
    with pytest.raises(he.HEArgumentError):
        he.encrypt_with_randomness(P10, pt, pair.pk, seed=b"short")


def test_flooding_hides_noise_within_documented_budget(P, kp, ev, rng):
    x = rng.uniform(-1, 1, P.max_slots) + 0j
    ct = ev.mul_rescale(P.encrypt(x, kp.pk), P.encode(x, level=P.max_level))
    ref = P.encode(x * x, level=ct.level, log_scale=ct.log_scale)
    std0, max0 = he.noise(P, ct, kp.sk, ref)
    log_b = he.flooding_log_bound(P, max0, stat_bits=10)
    fl = he.flood(P, ct, kp.pk, log_b, seed=b"\x02" * 16)
    std1, max1 = he.noise(P, fl, kp.sk, ref)
    assert max1 >= log_b - 1 and max1 <= log_b + 0.5
    err = np.abs(P.decrypt_decode(fl, kp.sk) - x * x).max()
    # budget: flooding 2^b in every coefficient costs ~ b + log2(N)/2 + 2 - log2(scale) bits
    budget = 2.0 ** (log_b + P.log_n / 2 + 2 - ct.log_scale)
    print(f"\n[he] flooding 2^{log_b}: noise 2^{max0:.1f} -> 2^{max1:.1f}, slot error {err:.2e}")
    assert err < budget
    assert not np.array_equal(fl.poly(1), ct.poly(1))  # c1 re-randomised
    with pytest.raises(he.HEArgumentError):
        he.flood(P, ct, kp.pk, 70, seed=b"\x02" * 16)


def test_rlwe_times_plaintext_polynomial_is_negacyclic_convolution(P, kp, rng):
    # An RLWE linear layer done directly on the ring: ct(v) * w(X) with small integer w.
    ev = he.Evaluator(P)
    v = rng.integers(-100, 100, P.n)
    w = np.zeros(P.n, dtype=np.int64)
    w[:9] = rng.integers(-3, 4, 9)
    ct = he.coeff_encrypt(P, v, kp.pk, SCALE)
    with he.coeff_encode(P, w, 1.0) as pw:
        prod = ev.mul(ct, pw)
    got = np.round(he.coeff_decrypt(P, prod, kp.sk, SCALE)).astype(np.int64)
    ref = np.zeros(P.n, dtype=np.int64)
    for j in np.nonzero(w)[0]:
        sh = np.roll(v, j)
        sh[:j] *= -1
        ref += w[j] * sh
    assert np.array_equal(got, ref)
    assert np.array_equal(np.round(he.coeff_decrypt(P, ev.add(ct, ct), kp.sk, SCALE)), 2 * v)
