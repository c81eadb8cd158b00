"""CKKS property tests against numpy (fast insecure parameter set)."""

import math

import numpy as np
import pytest

from secinfer.crypto import he



def bits(err: float) -> float:
    """Precision in bits of an absolute error on unit-size values."""
    return float(-np.log2(max(err, 2.0 ** -60)))


def cvec(rng, n, mag=1.0):
    return mag * (rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n))


def test_parameter_sets_declare_security():
    for name, spec in he.PARAMETER_SETS.items():
        if spec.insecure:
            assert spec.security_bits == 0 or "insecure" in name
        else:
            assert spec.security_bits == 128
            # beyond the Standard's table (logN 16) its logN = 15 bound: conservative
            assert spec.log_qp <= he.params.HE_STANDARD_128[min(spec.log_n, 15)]
    assert set(he.SECURE_SETS) == {"ckks-n13-128", "ckks-n13-q195-128", "ckks-n14-128", "ckks-n14-q380-128",
                                   "rlwe-n11-q53-w27-128", "rlwe-n11-q53-w18-128", "rlwe-n11-q53-w11-128",
                                   "ckks-n11-q53-w4-128",
                                   "ckks-boot-n16-128", "ckks-boot-n16-dense-128"}
    # the claim holds for the primes actually generated, not only their nominal sizes
    for name in he.SECURE_SETS:
        prm = he.get_params(name)
        assert sum(math.log2(int(q)) for q in tuple(prm.q) + tuple(prm.p)) <= \
            he.params.HE_STANDARD_128[min(prm.log_n, 15)]
    with pytest.raises(he.params.InsecureParametersError):
        he.get_params("ckks-n11-insecure", allow_insecure=False)


def test_encode_decode_precision(P, rng):
    for log_slots in (0, 3, P.log_max_slots):
        x = cvec(rng, 1 << log_slots)
        with P.encode(x, log_slots=log_slots) as pt:
            assert pt.slots == 1 << log_slots
            err = np.abs(P.decode(pt) - x).max()
        assert bits(err) > 30, (log_slots, err)


@pytest.mark.parametrize("key", ["pk", "sk"])
def test_encrypt_decrypt_precision(P, kp, rng, key):
    worst = 0.0
    for _ in range(4):
        x = cvec(rng, P.max_slots)
        with P.encrypt(x, getattr(kp, key)) as ct:
            assert ct.level == P.max_level and ct.degree == 1
            got = P.decrypt_decode(ct, kp.sk)
        worst = max(worst, np.abs(got - x).max())
    print(f"\n[he] fresh {key} encryption precision: {bits(worst):.1f} bits (scale 2^40)")
    assert bits(worst) > 20


def test_add_sub_mul_plain_and_cipher(P, kp, ev, rng):
    x, y = cvec(rng, P.max_slots), cvec(rng, P.max_slots)
    cx, cy = P.encrypt(x, kp.pk), P.encrypt(y, kp.pk)
    dd = lambda c: P.decrypt_decode(c, kp.sk)  # noqa: E731
    assert bits(np.abs(dd(ev.add(cx, cy)) - (x + y)).max()) > 20
    assert bits(np.abs(dd(ev.sub(cx, cy)) - (x - y)).max()) > 20
    with P.encode(y, level=cx.level) as py:
        assert bits(np.abs(dd(ev.add(cx, py)) - (x + y)).max()) > 20
        prod = ev.mul(cx, py)
    assert prod.log_scale == pytest.approx(80, abs=0.01)
    r = ev.rescale(prod)
    assert r.level == cx.level - 1
    e_pt = np.abs(dd(r) - x * y).max()
    raw = ev.mul(cx, cy, relin=False)
    assert raw.degree == 2
    rl = ev.rescale(ev.relinearize(raw))
    e_ct = np.abs(dd(rl) - x * y).max()
    e_ct2 = np.abs(dd(ev.mul_rescale(cx, cy)) - x * y).max()
    print(f"\n[he] mul by plaintext: {bits(e_pt):.1f} bits; ct x ct + relin: {bits(e_ct):.1f} bits")
    assert bits(e_pt) > 18 and bits(e_ct) > 18 and bits(e_ct2) > 18
    # two levels deep: x*y*x
    deep = ev.mul_rescale(ev.mul_rescale(cx, cy), ev.drop_level(cx, 1))
    assert deep.level == 0
    assert bits(np.abs(dd(deep) - x * y * x).max()) > 15
    # scalars
    assert bits(np.abs(dd(ev.add_scalar(cx, 2 - 1j)) - (x + 2 - 1j)).max()) > 20
    assert bits(np.abs(dd(ev.mul_scalar(cx, 3)) - 3 * x).max()) > 18
    assert bits(np.abs(dd(ev.mul_plain_vector(cx, y)) - x * y).max()) > 18


def test_add_scalar_keeps_a_non_default_scale(P, kp, ev, rng):
    """add_scalar encodes the constant at the ciphertext's scale and the result keeps that
    scale (it used to come back at the default scale: decryption off by 2^(s - 40))."""
    x = cvec(rng, P.max_slots)
    dd = lambda c: P.decrypt_decode(c, kp.sk)  # noqa: E731
    with P.encrypt(x, kp.pk, log_scale=30) as c30, P.encode(x, level=c30.level) as px:
        prod = ev.mul(c30, px)                   # scale 2^70, not rescaled
        for ct, want in ((c30, x), (prod, x * x)):
            with ev.add_scalar(ct, 2 - 1j) as got:
                assert got.log_scale == pytest.approx(ct.log_scale, abs=1e-9)
                assert got.level == ct.level
                assert bits(np.abs(dd(got) - (want + 2 - 1j)).max()) > 15
        prod.close()


def test_rescale_at_level_zero_is_typed_error(P, kp, ev):
    ct = P.encrypt([1.0], kp.pk, level=0)
    with pytest.raises(he.HEArgumentError):
        ev.rescale(ct)


def test_rotate_conjugate_hoisted(P, kp, ev, rng):
    x = cvec(rng, P.max_slots)
    cx = P.encrypt(x, kp.pk)
    dd = lambda c: P.decrypt_decode(c, kp.sk)  # noqa: E731
    for k in (1, 5, -7, 100):
        assert bits(np.abs(dd(ev.rotate(cx, k)) - np.roll(x, -k)).max()) > 20, k
    assert bits(np.abs(dd(ev.conjugate(cx)) - np.conj(x)).max()) > 20
    hs = ev.rotate_hoisted(cx, [1, 2, 3, 5])
    for k, c in hs.items():
        assert bits(np.abs(dd(c) - np.roll(x, -k)).max()) > 20, k
    # a rotation without its key is a typed error, not a crash
    with pytest.raises(he.HEError):
        ev.rotate(cx, 11)


def test_rotate_sparse_slots(P, kp, ev, rng):
    x = cvec(rng, 16)
    ct = P.encrypt(x, kp.pk, log_slots=4)
    got = P.decrypt_decode(ev.rotate(ct, 3), kp.sk)
    assert got.shape == (16,)
    assert bits(np.abs(got - np.roll(x, -3)).max()) > 20


@pytest.mark.parametrize("shape", [(10, 64), (64, 10), (30, 100), (128, 200)])
def test_dense_matvec_matches_numpy(P, kp, rng, shape):
    m, n = shape
    M = rng.standard_normal((m, n)) / np.sqrt(n)
    x = cvec(rng, n)
    plan = he.LinearPlan.dense(P, M)
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=plan.galois_elements())
    with he.Evaluator(P, keys) as ev:
        out = plan.apply(ev, plan.encrypt_input(x, kp.pk))
    got = plan.decrypt_output(out, kp.sk)
    err = np.abs(got - M @ x).max()
    print(f"\n[he] matvec {m}x{n}: {bits(err):.1f} bits, {plan.n_diagonals} diagonals")
    assert bits(err) > 18


def test_matvec_carries_mac_in_imaginary_part(P, kp, rng):
    # [CRISP Sec. III-B] x + i*mu*x through a real matrix gives Mx + i*mu*Mx.
    M = rng.integers(-8, 8, (16, 32)).astype(float) / 8
    x = rng.uniform(-1, 1, 32)
    mu = 0.37
    plan = he.LinearPlan.dense(P, M)
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=plan.galois_elements())
    with he.Evaluator(P, keys) as ev:
        got = plan.decrypt_output(plan.apply(ev, plan.encrypt_input(x + 1j * mu * x, kp.pk)), kp.sk)
    assert np.abs(got.real - M @ x).max() < 1e-5
    assert np.abs(got.imag - mu * (M @ x)).max() < 1e-5


def _conv_ref(w, x, stride, pad):
    co_n, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    Ho = (xp.shape[1] - kh) // stride + 1
    Wo = (xp.shape[2] - kw) // stride + 1
    out = np.zeros((co_n, Ho, Wo))
    for oy in range(Ho):
        for ox in range(Wo):
            patch = xp[:, stride * oy:stride * oy + kh, stride * ox:stride * ox + kw]
            out[:, oy, ox] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2]))
    return out


@pytest.mark.parametrize("cfg", [
    ((4, 1, 3, 3), (1, 8, 8), 1, 0),
    ((5, 1, 2, 2), (1, 14, 14), 2, 0),   # Network-B style: conv 2x2 stride 2
    ((3, 2, 3, 3), (2, 8, 8), 1, 1),
    ((4, 3, 5, 5), (3, 12, 12), 1, 0),   # several blocks of slots at N = 2^11
])
def test_conv2d_matches_numpy(P, kp, rng, cfg):
    wshape, ishape, stride, pad = cfg
    w = rng.standard_normal(wshape) / np.sqrt(np.prod(wshape[1:]))
    x = rng.uniform(-1, 1, ishape)
    plan = he.conv2d_plan(P, w, ishape, stride, pad)
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=plan.galois_elements())
    with he.Evaluator(P, keys) as ev:
        out = plan.apply(ev, plan.encrypt_input(x.reshape(-1), kp.pk))
    got = plan.decrypt_output(out, kp.sk).real
    ref = _conv_ref(w, x, stride, pad).reshape(-1)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() < 1e-5


def test_matvec_level_and_slot_checks(P, kp):
    plan = he.LinearPlan.dense(P, np.eye(8))
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=plan.galois_elements())
    ev = he.Evaluator(P, keys)
    with pytest.raises(he.HEArgumentError):
        plan.apply(ev, [P.encrypt(np.ones(8), kp.pk, level=1, log_slots=plan.log_slots)])
    with pytest.raises(he.HEArgumentError):
        plan.apply(ev, [P.encrypt(np.ones(8), kp.pk, log_slots=3)])
    with pytest.raises(he.HEArgumentError):
        plan.input_slots(np.ones(9))


@pytest.mark.slow
def test_multi_block_conv_and_large_dense(P, kp, rng):
    # Inputs/outputs spanning several ciphertexts (blocks of 2^8 slots).
    w = rng.standard_normal((4, 3, 3, 3)) / 6
    x = rng.uniform(-1, 1, (3, 12, 12))
    plan = he.conv2d_plan(P, w, (3, 12, 12), 1, 1, log_slots=8)
    assert plan.in_blocks == 2 and plan.out_blocks == 3
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=plan.galois_elements())
    with he.Evaluator(P, keys) as ev:
        got = plan.decrypt_output(plan.apply(ev, plan.encrypt_input(x.reshape(-1), kp.pk)), kp.sk)
    assert np.abs(got.real - _conv_ref(w, x, 1, 1).reshape(-1)).max() < 1e-5
    # A dense matrix wider than one ciphertext falls back to square blocks.
    M = rng.standard_normal((20, P.max_slots + 100)) / 40
    v = rng.uniform(-1, 1, M.shape[1])
    big = he.LinearPlan.dense(P, M)
    assert big.in_blocks == 2
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=big.galois_elements())
    with he.Evaluator(P, keys) as ev:
        got = big.decrypt_output(big.apply(ev, big.encrypt_input(v, kp.pk)), kp.sk)
    assert np.abs(got.real - M @ v).max() < 1e-4
