"""The amortised proof of plaintext knowledge (crypto/zk/popk.py) on its own."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he.rlwe import coeff_encode
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk import keyproof, popk
from secinfer.errors import ConfigError, FrameError

LEVEL, LOG_DELTA, D = 1, 40, 20
DELTA = 1 << LOG_DELTA


@pytest.fixture(scope="module")
def P():
    return he.get_params("ckks-n10-insecure", allow_insecure=True)


@pytest.fixture(scope="module")
def kp(P):
    pair = P.keygen()
    yield pair
    pair.close()


def _support(P):
    half = P.n // 2
    return np.concatenate([np.arange(0, 100), half + np.arange(0, 100)])


def _encrypt(P, kp, prg, n, digits=None):
    sup = _support(P)
    out = []
    for j in range(n):
        m = np.zeros(P.n, np.int64)
        m[sup] = (prg.uint64(sup.size) & np.uint64((1 << D) - 1)).astype(np.int64)
        if digits is not None and j == 0:
            m[sup[0]] = digits
        with coeff_encode(P, m.astype(np.float64), 2.0 ** LOG_DELTA, LEVEL) as pt:
            ct, r = he.encrypt_with_randomness(P, pt, kp.pk, seed=prg.seed())
        out.append((ct, [m, r.u, r.e0, r.e1]))
    return out


def _run(P, kp, batch, prg, tamper=None, force=False, d=D):
    cts = [c for c, _ in batch]
    prover = popk.Prover(P, kp.pk, LEVEL, DELTA, d, _support(P), [w for _, w in batch], prg.derive("p"))
    verifier = popk.Verifier(P, kp.pk, LEVEL, DELTA, d, _support(P), cts)
    vprg = prg.derive("v")
    for attempt in range(popk.MAX_ATTEMPTS):
        h = prover.commit()
        seed = vprg.seed()
        z = prover.respond(seed, force=force)
        if z is None:
            continue
        if tamper:
            h, z = tamper(h, z)
        return verifier.check(h, seed, z), attempt
    return (False, "attempts exhausted"), popk.MAX_ATTEMPTS


def test_honest_proof_accepted_over_many_seeds(P, kp):
    attempts = []
    for s in range(12):
        prg = PRG.for_tests(s)
        batch = _encrypt(P, kp, prg, 1 + s % 4)
        (ok, why), att = _run(P, kp, batch, prg)
        assert ok, why
        attempts.append(att)
    assert max(attempts) <= 3


def _encrypt_wide(P, kp, prg, n, d, big=None):
    """Digits of d > 62 bits: the message as 40-bit limbs (rlwe.encode_limbs' format)."""
    from secinfer.crypto.he import linmap
    from secinfer.crypto.he.rlwe import encode_limbs

    sup = _support(P)
    out = []
    for j in range(n):
        vals = [0] * P.n
        for i, pos in enumerate(sup):
            vals[pos] = int.from_bytes(prg.seed()[:-(-d // 8)], "little") % (1 << d)
        if big is not None and j == 0:
            vals[sup[3]] = big
        limbs = linmap.to_limbs(vals, -(-(d + 40) // 40))
        with encode_limbs(P, limbs, np.zeros((1, P.n), np.int64), LOG_DELTA, LEVEL) as pt:
            ct, r = he.encrypt_with_randomness(P, pt, kp.pk, seed=prg.seed())
        out.append((ct, [limbs, r.u, r.e0, r.e1]))
    return out


def test_wide_digits_as_limbs(P, kp):
    """D = 104 (one digit per share of Z_2^104): responses of ~135 bits in three limbs;
    honest batches pass, a digit 2^30 times too large or a flipped response bit fails."""
    d = 104
    g = popk.Geometry(P.n, 3, 200, d)
    assert g.limbs[0] == 3 and g.fields[0][:2] == [40, 40] and sum(g.fields[0]) == g.r[0] + 1
    for s in range(3):
        prg = PRG.for_tests(300 + s)
        (ok, why), _ = _run(P, kp, _encrypt_wide(P, kp, prg, 1 + s, d), prg, d=d)
        assert ok, why
    prg = PRG.for_tests(310)
    bad = _encrypt_wide(P, kp, prg, 3, d, big=1 << (d + 30))
    for force in (False, True):
        (ok, _), _ = _run(P, kp, bad, prg.derive(str(force)), force=force, d=d)
        assert not ok
    batch = _encrypt_wide(P, kp, prg, 2, d)

    def flip(h, z):
        b = bytearray(z)
        b[5] ^= 0x04
        return h, bytes(b)
    (ok, _), _ = _run(P, kp, batch, prg.derive("t"), tamper=flip, d=d)
    assert not ok


def test_geometry_and_soundness_parameters(P):
    g = popk.Geometry(P.n, 4, 200, D)
    # challenges from {0, +-1, +-i}: 19 rows for 16 attempts at 2^-40 (binary needed 44)
    assert g.V == 19 and popk.MAX_ATTEMPTS * 5.0 ** -g.V <= 2.0 ** -40
    assert popk.MAX_ATTEMPTS * 5.0 ** -(g.V - 1) > 2.0 ** -40
    assert popk.rows_for(40, chal_set=2) == 44
    # masks 2^k_rej wider than the largest shift; the packed widths
    assert all(r == s.bit_length() + g.k for r, s in zip(g.r, g.shift))
    # extraction: (z - z') < 2^(r+1), times 2 / delta (at most doubles), for 2 c_j
    pb = keyproof.ProvenBounds(P.n)
    assert pb.factor == 2
    assert pb.u >= 2 * 2 ** (g.r[1] + 1) and pb.e == 2 * popk.E_PROVEN     # e0, e1: rounded away
    assert 2 ** (D + pb.m_extra_bits) >= 2 * 2 ** (g.r[0] + 1)
    with pytest.raises(ConfigError):
        popk.Geometry(P.n, popk.N_MAX + 1, 10, D)


def _raise_e0(P, ct, w, pos, bits):
    """(ct, witness) with e0 += 2^bits at coefficient pos (off the message support)."""
    e = np.zeros(P.n)
    e[pos] = 2.0 ** bits / 2.0 ** LOG_DELTA
    with coeff_encode(P, e, 2.0 ** LOG_DELTA, LEVEL) as pt:
        ct2 = he.Evaluator(P).add(ct, pt)
    w = [w[0], w[1], w[2].copy(), w[3]]
    w[2][pos] += 1 << bits
    return ct2, w


@pytest.mark.parametrize("case", ["digit", "noise", "random"])
def test_malformed_ciphertext_rejected(P, kp, case):
    prg = PRG.for_tests(99)
    if case == "digit":     # one digit far above 2^D
        batch = _encrypt(P, kp, prg, 3, digits=1 << (D + 30))
    else:
        batch = _encrypt(P, kp, prg, 3)
        ct, w = batch[1]
        if case == "noise":     # e0 += 2^44 > q_r (the proven bound of e0) off the support
            ct2, w = _raise_e0(P, ct, w, 300, 44)
        else:                   # c * (random polynomial): no short preimage
            r = (prg.uint64(P.n) & np.uint64((1 << 40) - 1)).astype(np.float64)
            with coeff_encode(P, r, 1.0, LEVEL) as pt:
                ct2 = he.Evaluator(P).mul(ct, pt, relin=False)
        batch[1] = (ct2, w)
    for force in (False, True):
        (ok, why), _ = _run(P, kp, batch, prg.derive(str(force)), force=force)
        assert not ok


def test_tampered_hash_or_response_rejected(P, kp):
    prg = PRG.for_tests(7)
    batch = _encrypt(P, kp, prg, 2)
    flip_h = lambda h, z: (bytes([h[0] ^ 1]) + h[1:], z)
    (ok, _), _ = _run(P, kp, batch, prg.derive("a"), tamper=flip_h)
    assert not ok
    for pos in (0, 1000, -1):
        def flip_z(h, z, pos=pos):
            b = bytearray(z)
            b[pos] ^= 0x10
            return h, bytes(b)
        (ok, _), _ = _run(P, kp, batch, prg.derive(f"b{pos}"), tamper=flip_z)
        assert not ok


def test_wrong_size_response_is_frame_error(P, kp):
    prg = PRG.for_tests(8)
    batch = _encrypt(P, kp, prg, 2)
    with pytest.raises(FrameError):
        _run(P, kp, batch, prg, tamper=lambda h, z: (h, z[:-1]))
    with pytest.raises(FrameError):
        _run(P, kp, batch, prg, tamper=lambda h, z: (h, z + b"\0"))


def test_precommitted_first_message_verifies_and_is_used_once(P, kp):
    prg = PRG.for_tests(21)
    batch = _encrypt(P, kp, prg, 3)
    pre = popk.precommit(P, kp.pk, LEVEL, DELTA, D, _support(P), 3, prg.derive("pre"))
    prover = popk.Prover(P, kp.pk, LEVEL, DELTA, D, _support(P), [w for _, w in batch], prg.derive("p"))
    verifier = popk.Verifier(P, kp.pk, LEVEL, DELTA, D, _support(P), [c for c, _ in batch])
    h = prover.commit(pre)
    assert h == pre[1]
    seed = prg.seed()
    z = prover.respond(seed)
    if z is not None:                    # (a 2^-3 rejection would mean: commit afresh)
        assert verifier.check(h, seed, z) == (True, "")
    with pytest.raises(ConfigError):     # one response per commitment
        prover.respond(seed)


def test_e0_below_the_rounding_prime_is_provable_and_bounded(P, kp):
    """e0 (and e1) are rounded away: an accepted proof bounds them by q_r (< 2^41, ProvenBounds.e),
    not by the honest 20. A spike of 2^30 (dishonest but harmless: the budget is sized
    for ProvenBounds) is provable with the true witness; 2^44 is not (test above)."""
    prg = PRG.for_tests(31)
    batch = _encrypt(P, kp, prg, 2)
    batch[0] = _raise_e0(P, *batch[0], 300, 30)
    (ok, why), _ = _run(P, kp, batch, prg)
    assert ok, why
    pb = keyproof.ProvenBounds(P.n)
    q_r = P.q[popk.round_prime(P, LEVEL)]
    assert 2 * q_r < pb.e == 2 * popk.E_PROVEN <= 2 ** 42


def _negacyclic(a, b):
    """a b in Z[X]/(X^n + 1), schoolbook (independent of the HE layer)."""
    n = len(a)
    full = np.convolve(np.asarray(a, object), np.asarray(b, object))
    out = np.array(full[:n], object)
    out[:len(full) - n] -= full[n:]
    return out


def _chal_poly(code, n):
    """The challenge element coded 0..4 as a polynomial: 0, 1, -1, X^(n/2), -X^(n/2)."""
    p = np.zeros(n, object)
    if code:
        p[0 if code < 3 else n // 2] = 1 if code in (1, 3) else -1
    return p


def test_extraction_multiplier_for_every_challenge_difference():
    """Soundness rests on: for any two challenges c != c' there is rho in Z[i] (i = X^(N/2))
    with rho (c - c') = 2, and rho at most doubles a coefficient (its coefficients' absolute
    values sum to <= 2). Checked by schoolbook arithmetic in Z[X]/(X^16 + 1)."""
    n = 16
    candidates = []
    for a in range(-2, 3):
        for b in range(-2, 3):
            rho = np.zeros(n, object)
            rho[0], rho[n // 2] = a, b
            candidates.append(rho)
    two = np.zeros(n, object)
    two[0] = 2
    for c in range(5):
        for c2 in range(5):
            if c == c2:
                continue
            d = _chal_poly(c, n) - _chal_poly(c2, n)
            found = [r for r in candidates if np.array_equal(_negacyclic(r, d), two)]
            assert found, (c, c2)
            assert sum(abs(int(x)) for x in found[0]) <= 2


def test_challenge_entries_are_the_five_codes_uniformly():
    m = popk.challenge(b"\x01" * 16, 400, 64)
    assert m.dtype == np.uint8 and m.shape == (400, 64)
    counts = np.bincount(m.reshape(-1), minlength=5)
    assert counts.size == 5 and counts.sum() == 400 * 64
    # 25,600 draws, expected 5,120 each: 6 sigma (sigma ~ 64) bounds a biased expansion
    assert np.all(np.abs(counts - 5120) < 6 * 64), counts
    assert not np.array_equal(m, popk.challenge(b"\x02" * 16, 400, 64))


def test_times_i_is_multiplication_by_x_to_the_half():
    rng = np.random.default_rng(5)
    w = rng.integers(-1000, 1000, 16)
    ref = _negacyclic(w, _chal_poly(3, 16))
    assert np.array_equal(popk.times_i(w).astype(object), ref)


def test_support_must_be_closed_under_i(P, kp):
    prg = PRG.for_tests(40)
    batch = _encrypt(P, kp, prg, 1)
    bad = np.concatenate([np.arange(0, 100), P.n // 2 + np.arange(1, 101)])
    with pytest.raises(ConfigError, match="closed under i"):
        popk.Verifier(P, kp.pk, LEVEL, DELTA, D, bad, [batch[0][0]])
