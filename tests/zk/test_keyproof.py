"""The proof that a public key is well formed (``crypto.zk.keyproof``) and the Go layer's
seeded key generation / key map it rests on, against an independent big-integer
reference."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.crypto.he import linmap, rlwe
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.params import get_params
from secinfer.crypto.prg import PRG
from secinfer.crypto.zk import keyproof, popk
from secinfer.errors import FrameError

WIDE = get_params("ckks-n12-wide-insecure")
SMALL = get_params("ckks-n10-insecure")
A_SEED = bytes(range(16))


def _key(prm, seed=b"k" * 16):
    kp, s, e = rlwe.keygen_seeded(prm, A_SEED, seed)
    return kp, s, e, rlwe.public_key_from_parts(prm, A_SEED, kp.pk.poly(0))


def _negacyclic(a, s, q):
    """Schoolbook a * s in Z_q[X]/(X^N + 1) with Python integers (independent reference)."""
    n = len(a)
    a = [int(v) for v in a]
    out = [0] * n
    for i, si in enumerate(int(v) for v in s):
        if si == 0:
            continue
        for j in range(n):
            k = i + j
            if k < n:
                out[k] += si * a[j]
            else:
                out[k - n] -= si * a[j]
    return [v % q for v in out]


def test_seeded_keygen_matches_big_integer_reference():
    kp, s, e, srv = _key(SMALL)
    assert set(np.unique(s)) <= {-1, 0, 1} and np.abs(e).max() <= 19
    assert np.count_nonzero(s) > SMALL.n // 2          # dense ternary, the set's Xs
    a, pk0 = srv.poly(1), srv.poly(0)
    np.testing.assert_array_equal(a, kp.pk.poly(1))    # both sides expand the same a
    for lv, q in enumerate(SMALL.q):
        as_ = _negacyclic(a[lv], s, q)
        assert [int(x) for x in pk0[lv]] == [(int(ei) - v) % q for ei, v in zip(e, as_)]


def test_key_image_multi_limb_against_big_integers():
    """F(s, e) = e - a s for ~70-bit arguments (two limbs), as the proof's responses are."""
    _, _, _, srv = _key(SMALL)
    rng = np.random.default_rng(5)
    n = SMALL.n
    s = [int(v) for v in rng.integers(-(1 << 62), 1 << 62, n)]
    s = [v * 256 + 7 for v in s]                       # ~70 bits, sign mixed
    e = [int(v) for v in rng.integers(-(1 << 50), 1 << 50, n)]
    row = np.concatenate([linmap.to_limbs(s, 2).reshape(-1), linmap.to_limbs(e, 2).reshape(-1)])
    got = linmap.key_image(SMALL, srv, [2, 2], row)
    a = srv.poly(1)
    for lv, q in enumerate(SMALL.q):
        as_ = _negacyclic(a[lv], s, q)
        assert [int(x) for x in got[lv]] == [(ei - v) % q for ei, v in zip(e, as_)]


def test_a_depends_on_the_seed_and_looks_uniform():
    k1 = rlwe.keygen_seeded(WIDE, A_SEED, b"x" * 16)[0]
    k2 = rlwe.keygen_seeded(WIDE, bytes(16), b"x" * 16)[0]
    a1, a2 = k1.pk.poly(1), k2.pk.poly(1)
    assert not np.array_equal(a1, a2)
    for lv, q in enumerate(WIDE.q):          # mean of N uniform residues: q/2 +- a few sigma
        m = a1[lv].astype(np.float64).mean() / q
        assert abs(m - 0.5) < 6 * (1 / np.sqrt(12 * WIDE.n))


def test_q_only_key_encrypts_only_through_the_provable_path():
    kp, _, _, srv = _key(WIDE)
    with rlwe.coeff_encode(WIDE, np.arange(16.0), 2.0 ** 40, WIDE.max_level) as pt:
        ct, _ = rlwe.encrypt_with_randomness(WIDE, pt, srv, seed=b"r" * 16)
        np.testing.assert_allclose(rlwe.coeff_decrypt(WIDE, ct, kp.sk, 2.0 ** 40)[:16],
                                   np.arange(16.0), atol=1e-6)
        with pytest.raises(HEArgumentError):
            WIDE.encrypt(pt, srv)             # Lattigo's encryptor would use the P part
    with pytest.raises(HEArgumentError):
        srv.to_bytes()


def test_unreduced_or_misshaped_pk0_is_refused():
    pk0 = _key(WIDE)[0].pk.poly(0)
    bad = pk0.copy()
    bad[2, 5] = WIDE.q[2]
    with pytest.raises(HEArgumentError):
        rlwe.public_key_from_parts(WIDE, A_SEED, bad)
    with pytest.raises(HEArgumentError):
        rlwe.public_key_from_parts(WIDE, A_SEED, pk0[:-1])
    with pytest.raises(HEArgumentError):
        rlwe.public_key_from_parts(WIDE, b"short", pk0)


def _prove(prm, kp, s, e, seed=b"c" * 16, force=False, prg_seed=b"p" * 16):
    prover = keyproof.KeyProver(prm, kp.pk, s, e, PRG(prg_seed, "test"))
    h = prover.commit()
    return h, prover.respond(seed, force=force)


@pytest.mark.parametrize("i", range(4))
def test_honest_key_proof_accepted(i):
    kp, s, e, srv = _key(WIDE, bytes([i]) * 16)
    for a in range(popk.MAX_ATTEMPTS):
        h, z = _prove(WIDE, kp, s, e, seed=bytes([a, i]) * 8, prg_seed=bytes([i, a]) * 8)
        if z is not None:
            break
    assert keyproof.KeyVerifier(WIDE, srv).check(h, bytes([a, i]) * 8, z) == (True, "")


def test_geometry_and_proven_bounds():
    g = keyproof.KeyGeometry(1 << 14)
    assert g.V == 44 and g.k == 24 and g.r == [25, 29]
    assert g.proven == (1 << 26, 1 << 30)
    pb = keyproof.ProvenBounds(1 << 14)
    assert (pb.s_pk, pb.e_pk) == g.proven
    assert pb.noise_bound() >= (1 << 14) * pb.e_pk * pb.u + (1 << 14) * pb.e * pb.s_pk


def _dishonest(prm, s, e):
    """pk0 = e - a s exactly, for any (s, e): the key a cheating client would publish."""
    kp, _, _, _ = _key(prm)
    pk0 = linmap.key_image(prm, kp.pk, [1, 1], np.concatenate([s, e]))
    return kp, rlwe.public_key_from_parts(prm, A_SEED, pk0)


@pytest.mark.parametrize("kind", ["uniform-s", "large-e"])
def test_dishonest_key_rejected(kind):
    _, s, e, _ = _key(WIDE)
    rng = np.random.default_rng(3)
    if kind == "uniform-s":
        s = rng.integers(-(1 << 40), 1 << 40, WIDE.n)
    else:
        e = e.copy()
        e[7] += 1 << 35
    kp, srv = _dishonest(WIDE, s, e)
    # an honest prover never gets an in-range response ...
    assert all(_prove(WIDE, kp, s, e, seed=bytes([a]) * 16, prg_seed=bytes([a, 1]) * 8)[1] is None
               for a in range(4))
    # ... and a cheating one that sends them anyway (packed at the field width, so they
    # arrive wrapped or out of range) is rejected
    h, z = _prove(WIDE, kp, s, e, force=True)
    ok, why = keyproof.KeyVerifier(WIDE, srv).check(h, b"c" * 16, z)
    assert not ok, why


def test_tampered_response_hash_or_pk0_rejected():
    kp, s, e, srv = _key(WIDE)
    for a in range(popk.MAX_ATTEMPTS):
        h, z = _prove(WIDE, kp, s, e, seed=bytes([a]) * 16, prg_seed=bytes([a, 2]) * 8)
        if z is not None:
            break
    seed = bytes([a]) * 16
    ver = keyproof.KeyVerifier(WIDE, srv)
    assert ver.check(h, seed, z)[0]
    zb = bytearray(z)
    zb[len(zb) // 3] ^= 0x04                         # one response coefficient changed
    assert not ver.check(h, seed, bytes(zb))[0]
    assert not ver.check(bytes([h[0] ^ 1]) + h[1:], seed, z)[0]
    assert not ver.check(h, bytes([a ^ 1]) * 16, z)[0]  # another challenge
    pk0 = srv.poly(0).copy()
    pk0[0, 3] = (int(pk0[0, 3]) + 1) % WIDE.q[0]     # pk0 that does not match the proof
    other = keyproof.KeyVerifier(WIDE, rlwe.public_key_from_parts(WIDE, A_SEED, pk0))
    assert not other.check(h, seed, z)[0]
    with pytest.raises(FrameError):
        ver.check(h, seed, z[:-1])
