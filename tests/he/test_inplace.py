"""Into-destination / in-place evaluator variants and the output-buffer pool: every
variant must give the same ciphertext (hence the same decryption) as the allocating call."""

import numpy as np
import pytest

from secinfer.crypto import he
from secinfer.native import lib as _native
from secinfer.crypto.he.errors import HEArgumentError, HEClosedError, ParameterMismatchError


def cvec(rng, n):
    return rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)


def same(a, b):
    """Identical ciphertexts: shape, scale and every residue of every component."""
    assert (a.level, a.degree, a.log_slots) == (b.level, b.degree, b.log_slots)
    assert a.log_scale == b.log_scale
    for i in range(a.degree + 1):
        np.testing.assert_array_equal(a.poly(i), b.poly(i))


@pytest.fixture
def data(P, kp, rng):
    x, y, z = (cvec(rng, P.max_slots) for _ in range(3))
    cx, cy = P.encrypt(x, kp.pk), P.encrypt(y, kp.pk)
    pz = P.encode(z)
    yield x, y, z, cx, cy, pz
    for o in (cx, cy, pz):
        o.close()


def test_mul_plain_into_and_in_place_match_allocating(P, kp, ev, data):
    x, _, z, cx, _, pz = data
    ref = ev.mul(cx, pz)
    dst = P.encrypt(np.zeros(4), kp.pk)           # any shape: it is resized
    assert ev.mul_plain(cx, pz, out=dst) is dst
    same(dst, ref)
    work = ev.add_scalar(cx, 0)                   # a copy to multiply in place
    ev.mul_plain(work, pz, out=work)
    same(work, ref)
    got = P.decrypt_decode(work, kp.sk)
    assert np.abs(got - x * z).max() < 2 ** -18
    np.testing.assert_array_equal(got, P.decrypt_decode(ref, kp.sk))
    # plain `mul` with out= takes the same path
    ev.mul(cx, pz, out=dst)
    same(dst, ref)
    # and repeated products keep giving the same answer (cached Montgomery form)
    again = ev.mul_plain(cx, pz)
    same(again, ref)
    for c in (ref, dst, work, again):
        c.close()


def test_mul_plain_at_a_lower_plaintext_level(P, kp, ev, data):
    x, _, z, cx, _, _ = data
    with P.encode(z, level=P.max_level - 1) as p1:
        ref = ev.mul(cx, p1)
        assert ref.level == P.max_level - 1
        work = ev.add_scalar(cx, 0)
        ev.mul_plain(work, p1, out=work)
    same(work, ref)
    assert np.abs(P.decrypt_decode(work, kp.sk) - x * z).max() < 2 ** -18
    ref.close()
    work.close()


def test_mul_plain_add_accumulates(P, kp, ev, data):
    x, y, z, cx, cy, pz = data
    with P.encode(np.conj(z)) as pw:
        ref = ev.add(ev.mul(cx, pz), ev.mul(cy, pw))
        acc = ev.mul(cx, pz)
        assert ev.mul_plain_add(cy, pw, acc) is acc
    same(acc, ref)
    got = P.decrypt_decode(acc, kp.sk)
    assert np.abs(got - (x * z + y * np.conj(z))).max() < 2 ** -17
    with pytest.raises(HEArgumentError):
        ev.mul_plain_add(acc, pz, acc)
    ref.close()
    acc.close()


def test_add_sub_rescale_into_match_allocating(P, kp, ev, data):
    x, y, z, cx, cy, pz = data
    for name in ("add", "sub"):
        op = getattr(ev, name)
        ref = op(cx, cy)
        dst = ev.add_scalar(cy, 0)
        op(cx, cy, out=dst)
        same(dst, ref)
        work = ev.add_scalar(cx, 0)
        op(work, cy, out=work)                    # in place, first operand
        same(work, ref)
        work2 = ev.add_scalar(cy, 0)
        op(cx, work2, out=work2)                  # in place, second operand
        same(work2, ref)
        with P.encode(y, level=cx.level) as py:   # ciphertext (op) plaintext
            ref_p = op(cx, py)
            op(cx, py, out=dst)
            same(dst, ref_p)
            ref_p.close()
        for c in (ref, dst, work, work2):
            c.close()
    prod = ev.mul(cx, pz)
    ref = ev.rescale(prod)
    dst = ev.add_scalar(cx, 0)
    ev.rescale(prod, out=dst)
    same(dst, ref)
    ev.rescale(prod, out=prod)
    same(prod, ref)
    assert np.abs(P.decrypt_decode(prod, kp.sk) - x * z).max() < 2 ** -18
    for c in (prod, ref, dst):
        c.close()


def test_recycled_output_buffers_never_leak_old_contents(P, kp, ev, data):
    # Allocating add/sub/mul-by-plaintext take their outputs from a pool that closed
    # outputs return to: results after many open/close cycles equal the first ones.
    x, y, z, cx, cy, pz = data
    ref_m, ref_a, ref_s = ev.mul(cx, pz), ev.add(cx, cy), ev.sub(cy, cx)
    with P.encode(z, level=P.max_level - 1) as p1:
        for i in range(30):
            outs = [ev.mul(cx, pz), ev.add(cx, cy), ev.sub(cy, cx), ev.mul(cy, p1)]
            if i % 7 == 0:
                same(outs[0], ref_m)
                same(outs[1], ref_a)
                same(outs[2], ref_s)
            ev.mul_plain(outs[1], pz, out=outs[1])    # reshape some before they go back
            ev.rescale(outs[0], out=outs[0])
            for c in outs:
                c.close()
    fin = [ev.mul(cx, pz), ev.add(cx, cy), ev.sub(cy, cx)]
    for got, ref in zip(fin, (ref_m, ref_a, ref_s)):
        same(got, ref)
    np.testing.assert_allclose(P.decrypt_decode(fin[1], kp.sk), x + y, atol=2 ** -20)
    for c in fin + [ref_m, ref_a, ref_s]:
        c.close()


def test_into_variants_create_no_handles_and_check_arguments(P, kp, ev, data):
    _, _, _, cx, cy, pz = data
    dst = ev.add(cx, cy)
    before = _native.live_handles()
    for _ in range(5):
        ev.mul_plain(cx, pz, out=dst)
        ev.add(cx, cy, out=dst)
        ev.mul_plain_add(cx, pz, dst) if dst.log_scale > 60 else None
    assert _native.live_handles() == before
    with pytest.raises(HEArgumentError):
        ev.mul_plain(cx, cy)                      # a ciphertext is not a plaintext
    with pytest.raises(HEArgumentError):
        ev.add(cx, cy, out=pz)                    # out must be a ciphertext
    other = he.get_params("ckks-n10-insecure")
    with other.keygen() as okp, other.encrypt(np.ones(4), okp.pk) as foreign:
        with pytest.raises(ParameterMismatchError):
            ev.add(cx, cy, out=foreign)
    dst.close()
    with pytest.raises(HEClosedError):
        ev.add(cx, cy, out=dst)
