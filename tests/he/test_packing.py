"""Fast packing, partial trace extraction and exact LWE linear layers
(secinfer.crypto.he.packing; SAFHIRE Sec. 4.3-4.4, Table 1). Small insecure rings."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.crypto.he import packing as pk

SMALL = "rlwe-n9-insecure"     # N = 512, one 53-bit Q prime, no P: 18-bit key-switching digits


@pytest.fixture(scope="module")
def P():
    return he.get_params(SMALL)


# ``kp`` (a key pair of ``P``) comes from tests/he/conftest.py, on this module's ``P``


@pytest.fixture(scope="module")
def ev(P, kp):
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, 0))
    e = he.Evaluator(P, keys)
    yield e
    e.close()
    keys.close()


@pytest.fixture(scope="module")
def prof():
    return pk.profile(16, SMALL)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % (2**32))


def _positions(P, n):
    return np.arange(P.n) if n == P.n else he.spread_positions(n, P.n)


@pytest.mark.parametrize("gamma", [0, 1, 2])
def test_pack_decrypts_exactly_and_counts_key_switches(P, kp, ev, prof, rng, gamma):
    x = rng.integers(-30000, 30000, P.n)
    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(gamma), gamma)
    assert len(chunk) == 1 << gamma
    for n in (1, 2, 3, 17, 200, P.n):
        idx = rng.permutation(P.n)[:n]
        batch = pk.extract(P, [chunk], idx, gamma=gamma)
        assert batch.log_scale == prof.log_delta and len(batch) == n
        ct, ks = pk.pack(ev, batch)
        assert ks == pk.expected_key_switches(P.log_n, n, gamma)
        # the closed form: N members cost N / 2^gamma - 1, i.e. ~1, 1/2, 1/4 per coefficient
        if n == P.n:
            assert ks == P.n // (1 << gamma) - 1
        dec = pk.decode(P, ct, kp.sk, prof.log_delta)
        pos = _positions(P, n)
        np.testing.assert_array_equal(dec[pos], x[idx])
        rest = np.ones(P.n, bool)
        rest[pos] = False
        assert not dec[rest].any()          # every other coefficient encrypts 0
        ct.close()


def test_base2_evaluation_keys_round_trip(P, kp, prof, rng):
    """The rlwe-* sets have no special prime: their Galois keys use 18/27-bit digits; the
    serialised keys load back with that layout (and only under the same set)."""
    assert P.p == () and P.spec.key_base2 == 18
    with P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, 2)) as keys:
        data = keys.to_bytes()
    with P.load(data) as keys2, he.Evaluator(P, keys2) as ev2:
        x = rng.integers(-100, 100, P.n)
        chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(2), 2)
        ct, _ = pk.pack(ev2, pk.extract(P, [chunk], np.arange(64), gamma=2))
        np.testing.assert_array_equal(pk.decode(P, ct, kp.sk, prof.log_delta)[he.spread_positions(64, P.n)], x[:64])
    with pytest.raises(he.ParameterMismatchError):
        he.get_params("rlwe-n11-q53-w27-128").load(data)


def test_pack_explicit_positions_any_order(P, kp, ev, prof, rng):
    x = rng.integers(-1000, 1000, P.n)
    chunk = pk.encrypt_powers(P, x, kp.pk, prof.input_log_scale(1), 1)     # public-key encryption
    batch = pk.extract(P, [chunk], np.arange(40), gamma=1)
    pos = rng.permutation(P.n)[:40]
    ct, _ = pk.pack(ev, batch, positions=pos)
    np.testing.assert_array_equal(pk.decode(P, ct, kp.sk, prof.log_delta)[pos], x[:40])


def test_several_chunks_and_threads(P, kp, ev, prof, rng):
    xs = [rng.integers(-500, 500, P.n) for _ in range(3)]
    chunks = [pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(2), 2) for x in xs]
    ch = rng.integers(0, 3, 300)
    idx = rng.integers(0, P.n, 300)
    b1 = pk.extract(P, chunks, idx, chunk_of=ch, gamma=2, threads=1)
    b2 = pk.extract(P, chunks, idx, chunk_of=ch, gamma=2, threads=2)
    np.testing.assert_array_equal(b1.a, b2.a)
    np.testing.assert_array_equal(b1.b, b2.b)
    want = np.array([xs[c][i] for c, i in zip(ch, idx)])
    for threads in (1, 2):
        ct, ks = pk.pack(ev, b1, threads=threads)
        assert ks == pk.expected_key_switches(P.log_n, 300, 2)
        np.testing.assert_array_equal(pk.decode(P, ct, kp.sk, prof.log_delta)[_positions(P, 300)], want)


def test_gamma0_batch_is_the_classic_lwe_extraction(P, kp, rng):
    """Independent cross-check: the ring-form batch at gamma = 0 equals the older
    LWEBatch export (b + <a, s> form) coefficient by coefficient."""
    x = rng.integers(-100, 100, P.n)
    ct = he.coeff_encrypt(P, x.astype(float), kp.sk, 2.0 ** 20)
    idx = np.array([0, 1, 5, 511, 300])
    ref_b, ref_a = he.extract_lwe(P, ct, idx).to_arrays()
    b, a = pk.extract(P, [[ct]], idx, gamma=0).lwe_vectors()
    np.testing.assert_array_equal(b, ref_b)
    np.testing.assert_array_equal(a, ref_a)


def test_automorph_coeffs_matches_naive(rng):
    n = 16
    m = rng.integers(-9, 9, n)
    for d in (1, 3, 5, 2 * n - 1, 2 * n - 5):
        want = np.zeros(n, dtype=np.int64)
        for j, v in enumerate(m):
            e = j * d % (2 * n)
            want[e % n] += v if e < n else -v
        np.testing.assert_array_equal(pk.automorph_coeffs(m, d), want)


def test_pretrace_elements_and_keys(P):
    N2 = 2 * P.n
    assert pk.pretrace_elements(P, 0) == [1]
    assert pk.pretrace_elements(P, 1) == [1, N2 - 1]
    assert pk.pretrace_elements(P, 2) == [1, N2 - 1, 5, 5 * (N2 - 1) % N2]
    # the depth-0 keys are Lattigo's packing keys; deeper levels need a suffix of them
    assert sorted(pk.pack_galois_elements(P, 0)) == sorted(set(P.galois_elements(pack=True)) - {1})
    assert pk.pack_galois_elements(P, 2) == pk.pack_galois_elements(P, 0)[2:]
    assert len(pk.pack_galois_elements(P, 1)) == P.log_n - 1


def _ref_linear(batch, W, bias=None):
    out_b = np.zeros((W.shape[0],) + batch.b.shape[1:], dtype=np.uint64)
    out_a = np.zeros((W.shape[0],) + batch.a.shape[1:], dtype=np.uint64)
    for l, q in enumerate(batch.moduli):
        Wo = W.astype(object)
        out_b[:, l] = ((Wo @ batch.b[:, l].astype(object)) % q).astype(np.uint64)
        out_a[:, l] = ((Wo @ batch.a[:, l].astype(object)) % q).astype(np.uint64)
        if bias is not None:
            out_b[:, l, 0] = [(int(v) + int(bv) * 2 ** batch.log_scale) % q for v, bv in zip(out_b[:, l, 0], bias)]
    return out_b, out_a


@pytest.mark.parametrize("wmax", [8, 1 << 20, 1 << 46])
def test_lwe_linear_residues_exact(P, kp, prof, rng, wmax):
    x = rng.integers(-100, 100, P.n)
    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(1), 1)
    batch = pk.extract(P, [chunk], np.arange(70), gamma=1)
    W = rng.integers(-wmax, wmax, (9, 70))
    bias = rng.integers(-1000, 1000, 9)
    for threads in (1, 2):
        y = pk.lwe_linear(batch, W, bias, threads=threads)
        rb, ra = _ref_linear(batch, W, bias)
        np.testing.assert_array_equal(y.b, rb)
        np.testing.assert_array_equal(y.a, ra)


def test_lwe_linear_sparse_matrix_equals_dense(P, kp, prof, rng):
    import scipy.sparse as sp

    x = rng.integers(-100, 100, P.n)
    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(0), 0)
    batch = pk.extract(P, [chunk], np.arange(60), gamma=0)
    W = rng.integers(-(1 << 20), 1 << 20, (11, 60)) * (rng.random((11, 60)) < 0.2)
    dense = pk.lwe_linear(batch, W)
    for Ws in (sp.csr_matrix(W), sp.coo_matrix(W)):
        sparse = pk.lwe_linear(batch, Ws)
        np.testing.assert_array_equal(sparse.a, dense.a)
        np.testing.assert_array_equal(sparse.b, dense.b)
    with pytest.raises(he.HEArgumentError):
        pk.lwe_linear(batch, sp.csr_matrix(np.ones((3, 59))))


@pytest.mark.parametrize("gamma", [0, 1, 2])
def test_linear_layer_round_trip_equals_plaintext_product(P, kp, ev, prof, rng, gamma):
    x = rng.integers(-40, 40, 300)
    W = rng.integers(-15, 16, (120, 300))
    bias = rng.integers(-2000, 2000, 120)
    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(gamma), gamma)
    batch = pk.extract(P, [chunk], np.arange(300), gamma=gamma)
    perm = rng.permutation(120)
    y = pk.lwe_linear(batch, W, bias).select(perm)        # shuffled, as the server does
    ct, _ = pk.pack(ev, y, threads=2)
    got = pk.decode(P, ct, kp.sk, prof.log_delta)[_positions(P, 120)]
    want = (W.astype(object) @ x.astype(object) + bias)[perm]
    lim = 1 << (prof.b - 1)
    assert np.all(np.abs(want) < lim)                      # inside the b-bit accumulator
    np.testing.assert_array_equal(got, want.astype(np.int64))
    # and mod p = 2^b, as the client reads it
    np.testing.assert_array_equal(np.mod(got, 1 << prof.b), np.mod(want.astype(np.int64), 1 << prof.b))


@pytest.mark.parametrize("gamma", [0, 1, 2])
def test_noise_within_bound(kp, ev, prof, rng, gamma):
    x = rng.integers(-20, 20, 256)
    W = rng.integers(-7, 8, (256, 256))
    e = pk.pipeline_noise(prof, kp, ev, gamma, x, W)
    bound = 2 ** prof.log_delta // 2
    assert np.abs(e).max() < bound
    # one key-switch noise per tree level (halved operands), not ~N of them: a single key
    # switch with w-bit digits adds ~2^(w + logN/2 + 2); N-fold growth would add 2^(logN / 2 + ...) more
    P = prof.params()
    assert np.abs(e).max() < 2.0 ** (P.spec.key_base2 + P.log_n / 2 + 6)


def test_profiles_for_b_8_12_16():
    for b in (8, 12, 16):
        prof = pk.profile(b)
        P = prof.params()
        assert P.security_bits == 128 and P.max_level == 0
        assert 2 ** prof.log_delta * 2 ** b <= P.q[0]
        assert prof.input_log_scale(2) == prof.log_delta - 2
    with pytest.raises(he.HEArgumentError):
        pk.profile(10)


def test_bad_arguments(P, kp, ev, prof, rng):
    x = rng.integers(-5, 5, P.n)
    chunk = pk.encrypt_powers(P, x, kp.sk, prof.input_log_scale(1), 1)
    batch = pk.extract(P, [chunk], np.arange(8), gamma=1)
    bad = [
        lambda: pk.encrypt_powers(P, x, kp.sk, 20, 3),                       # gamma
        lambda: pk.encrypt_powers(P, np.zeros(P.n + 1), kp.sk, 20, 0),       # too long
        lambda: pk.encrypt_powers(P, x + 0.5, kp.sk, 20, 0),                 # not integers
        lambda: pk.extract(P, [chunk[:1]], np.arange(8), gamma=1),           # chunk size
        lambda: pk.extract(P, [chunk], [P.n], gamma=1),                      # coefficient
        lambda: pk.extract(P, [chunk], [0, 1], chunk_of=[0, 1], gamma=1),    # chunk index
        lambda: pk.extract(P, [chunk], [0], gamma=1, threads=0),             # threads
        lambda: pk.pack(ev, batch, positions=[0, 0, 1, 2, 3, 4, 5, 6]),      # duplicate
        lambda: pk.pack(ev, batch, positions=[0, 1, 2, 3, 4, 5, 6, P.n]),    # out of range
        lambda: pk.pack(ev, batch, positions=[0, 1]),                        # count
        lambda: pk.lwe_linear(batch, np.ones((3, 7), dtype=np.int64)),       # shape
        lambda: pk.lwe_linear(batch, np.full((3, 8), 0.5)),                  # not integers
        lambda: pk.lwe_linear(batch, np.ones((3, 8), dtype=np.int64), bias=[1, 2]),
        lambda: pk.lwe_linear(batch, np.full((3, 8), 1 << 50, dtype=np.int64)),
        lambda: batch.select([8]),
        lambda: pk.LWEArrays(P, batch.b[:, :, :1], batch.a, 1, 0),           # shape / gamma
    ]
    for fn in bad:
        with pytest.raises(he.HEArgumentError):
            fn()
    # packing without the Galois keys
    with P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, 2)) as keys:
        with he.Evaluator(P, keys) as ev2:
            with pytest.raises(he.HEArgumentError, match="Galois key"):
                pk.pack(ev2, batch)
    # unreduced residues are refused by the Go layer
    b2 = pk.LWEArrays(P, batch.b.copy(), batch.a.copy(), 1, batch.log_scale)
    b2.a[0, 0, 0] = np.uint64(P.q[0])
    with pytest.raises(he.HEArgumentError, match="not reduced"):
        pk.pack(ev, b2)


def test_parameter_set_that_cannot_key_switch_refuses_keys():
    """Issue 22 item 8: ckks-n13-q195-128's 22-bit P is 38 bits below its 60-bit digit."""
    P = he.get_params("ckks-n13-q195-128")
    assert not P.spec.key_switching
    with P.keygen() as kp:
        for kw in ({}, {"relin": False, "rotations": [1]}, {"relin": False, "galois": [5]}):
            with pytest.raises(he.HEArgumentError, match="cannot key-switch"):
                P.gen_eval_keys(kp.sk, **kw)
        P.gen_eval_keys(kp.sk, relin=False).close()     # no key switching: allowed
    for name in ("ckks-n13-128", "ckks-n14-128", "ckks-n14-q380-128", "rlwe-n11-q53-w27-128", "rlwe-n11-q53-w18-128"):
        assert he.get_params(name).spec.key_switching
