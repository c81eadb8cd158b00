"""Trimmed answers of the HE engine (c1 in full, c0 only at the coefficients the client
reads): the same ring values as decrypting the full ciphertext, for both layouts and
both securities, and malformed frames are FrameErrors before decryption."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.arith.ring import Ring
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext
from secinfer.crypto.he.trimmed import trim, trimmed_size
from secinfer.crypto.prg import PRG
from secinfer.errors import FrameError
from secinfer.protocols.crisp import he_conv, he_rows
from secinfer.protocols.crisp.ckks_engine import CKKSLinear
from secinfer.protocols.crisp.he_core import _mask_key, ct_pt_dot

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import lin_step  # noqa: E402

PARAMS = "ckks-n12-wide-insecure"
SECURITIES = ["semi-honest", "malicious"]


def _digits(rng, shape, bits):
    """Uniform digits of ``bits`` bits (object array: exact for any width)."""
    words = [rng.integers(0, 1 << 32, shape, dtype=np.int64).astype(object) << (32 * i)
             for i in range(-(-bits // 32))]
    return sum(words) % (1 << bits)


def _limbs(d):
    """Digits (object array) as the engine's 40-bit limb list."""
    n = max(1, -(-max(int(v).bit_length() for v in d.reshape(-1)) // 40))
    return [((d >> (40 * l)) & ((1 << 40) - 1)).astype(np.int64) for l in range(n)]


def _engines(malicious: bool):
    grp = Ring(104 if malicious else 64)
    eng_c = CKKSLinear(grp, 13, malicious, PARAMS, allow_insecure=True)
    eng_s = CKKSLinear(grp, 13, malicious, PARAMS, allow_insecure=True)
    kp = eng_c.params.keygen()
    eng_c.sk, eng_c.pk = kp.sk, kp.pk
    eng_s.pk = kp.pk
    return grp, eng_c, eng_s


def _encrypt(eng, poly, bud) -> Ciphertext:
    from secinfer.crypto.he.rlwe import encode_limbs

    limbs = poly if poly.ndim == 2 else poly.astype(np.int64)[None]
    with encode_limbs(eng.params, limbs, np.zeros((1, eng.params.n), np.int64), 0, bud.level,
                      delta=bud.delta) as pt:
        return eng.params.encrypt(pt, eng.pk)


def _full_path(eng_c, out, bud, pos):
    """The reference: the whole ciphertext serialised, loaded, decrypted (as before)."""
    prm = eng_c.params
    with prm.load(out.to_bytes(), Ciphertext) as ct, prm.decrypt(ct, eng_c.sk) as pt:
        res = pt.poly(0)
    return eng_c.decode_residues(res[:, eng_c.read_positions(bud, pos)], bud, pos)


def _check_answer(grp, eng_c, eng_s, ev, make_acc, bud, pos, expect, prg):
    """One answer both ways (full ciphertext / trimmed frame of the same ciphertext), and
    one through masked_answer: all reconstruct the expected products with the mask."""
    out, rmask = eng_s.masked_rescaled(1, make_acc(), bud, prg)
    read = eng_c.read_positions(bud, pos)
    raw = np.frombuffer(trim(eng_c.params, out, read), np.uint8)
    assert raw.size == trimmed_size(eng_c.params, bud.level - bud.drop, read.size)
    assert raw.size < 0.55 * len(out.to_bytes())
    full = _full_path(eng_c, out, bud, pos)
    out.close()
    got = eng_c.decrypt_positions(raw, bud, pos)
    assert len(got) == len(full) == (2 if eng_c.malicious else 1)
    for k, (a, b, e) in enumerate(zip(got, full, expect)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(grp.add(a, rmask[pos + k * bud.half]), grp.from_int(e))
    raw2, rmask2 = eng_s.masked_answer(1, make_acc(), bud, prg, pos)
    for k, (a, e) in enumerate(zip(eng_c.decrypt_positions(raw2, bud, pos), expect)):
        np.testing.assert_array_equal(grp.add(a, rmask2[pos + k * bud.half]), grp.from_int(e))
    return raw


def _one_row_block(eng_c, eng_s, malicious: bool, seed: int):
    """Three rows of 20 random digits against a random 20 x 5 weight of 11 bits: the budget,
    the digits (real, imaginary), the weight, the client's ciphertext, the weight
    polynomials, an evaluator and the answer's positions."""
    rng = np.random.default_rng(seed)
    k_in, n_out, n_rows, wbits = 20, 5, 3, 11
    bud = eng_s.budget(k_in, n_out, wbits)
    d_re = _digits(rng, (n_rows, k_in), bud.D)
    d_im = _digits(rng, (n_rows, k_in), bud.D)
    mat = rng.integers(-(1 << 10), 1 << 10, (k_in, n_out))
    poly = he_rows.client_poly(eng_c.params.n, _limbs(d_re), _limbs(d_im) if malicious else None, bud, 0, 0)
    ct = _encrypt(eng_c, poly, bud)
    wp = he_rows.weight_polys(eng_s, mat, bud)
    _, _, pos = he_rows.targets(bud, n_rows, 0, 0, n_out)
    return bud, d_re, d_im, mat, ct, wp, Evaluator(eng_s.params), pos


@pytest.mark.parametrize("security", SECURITIES)
def test_rows_trimmed_equals_full(security):
    malicious = security == "malicious"
    grp, eng_c, eng_s = _engines(malicious)
    bud, d_re, d_im, mat, ct, wp, ev, pos = _one_row_block(eng_c, eng_s, malicious, 5)
    assert bud.n_chunks == 1 and bud.n_blocks == 1 and bud.rows_per >= 3
    expect = [d_re.dot(mat.astype(object)), d_im.dot(mat.astype(object))][:2 if malicious else 1]
    _check_answer(grp, eng_c, eng_s, ev, lambda: ct_pt_dot(ev, [ct], [wp[0, 0]]), bud, pos, expect,
                  PRG.for_tests(21))
    ct.close()
    for p in wp.values():
        p.close()
    ev.close()


def _conv_expect(t, w, lay):
    out = np.zeros((lay.M, lay.OH, lay.OW), dtype=object)
    for m in range(lay.M):
        for i in range(lay.OH):
            for j in range(lay.OW):
                win = t[:, i * lay.sh:i * lay.sh + lay.kh, j * lay.sw:j * lay.sw + lay.kw]
                out[m, i, j] = int(np.sum(win * w[m].astype(object)))
    return out


@pytest.mark.parametrize("security", SECURITIES)
def test_conv_trimmed_equals_full(security):
    malicious = security == "malicious"
    grp, eng_c, eng_s = _engines(malicious)
    rng = np.random.default_rng(6)
    c, m = 2, 9
    step = lin_step({"op": "lin", "node_op": "Conv", "name": "conv", "in": "a", "out": "b", "in_shape": [1, c, 9, 9],
            "out_shape": [1, m, 5, 5], "wbits": 11,
            "attrs": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                      "dilations": [1, 1], "group": 1}})
    lay = eng_s.conv_layout(step)
    assert lay is not None and lay.n_cg == 1 and lay.n_mb > 1
    w = rng.integers(-2000, 2001, (m, c, 3, 3))
    t_re, t_im = np.zeros((2, c, 11, 11), object)       # Python-int zeros: exact sums
    t_re[:, 1:-1, 1:-1] = _digits(rng, (c, 9, 9), lay.D)
    t_im[:, 1:-1, 1:-1] = _digits(rng, (c, 9, 9), lay.D)
    poly = he_conv.client_poly(eng_c.params.n, _limbs(t_re), _limbs(t_im) if malicious else None)
    ct = _encrypt(eng_c, poly, lay)
    kp = he_conv.kernel_polys(eng_s, lay, w)
    ev = Evaluator(eng_s.params)
    exp_re, exp_im = _conv_expect(t_re, w, lay), _conv_expect(t_im, w, lay)
    prg = PRG.for_tests(22)
    for mb in range(lay.n_mb):
        ms, pos = lay.positions(mb)
        expect = [exp_re[ms], exp_im[ms]][:2 if malicious else 1]
        _check_answer(grp, eng_c, eng_s, ev, lambda: ct_pt_dot(ev, [ct], [kp[0, mb]]), lay, pos, expect, prg)
    ct.close()
    for p in kp.values():
        p.close()
    ev.close()


# malicious frames of this layer have no padding bits (2 x 15 read positions: every row a
# whole number of bytes), so "padding-bits" runs semi-honest only
@pytest.mark.parametrize("security,bad", [
    (sec, bad) for sec in SECURITIES
    for bad in ["truncated", "padded", "empty", "unreduced-c0", "unreduced-c1", "padding-bits"]
    if not (sec == "malicious" and bad == "padding-bits")])
def test_malformed_trimmed_answer_is_a_frame_error(security, bad, monkeypatch):
    from secinfer.crypto.he import trimmed as trim_mod

    malicious = security == "malicious"
    grp, eng_c, eng_s = _engines(malicious)
    bud = eng_s.budget(20, 5, 11)
    _, _, pos = he_rows.targets(bud, 3, 0, 0, 5)
    ev = Evaluator(eng_s.params)
    ct = _encrypt(eng_c, np.zeros(eng_c.params.n), bud)
    with he_rows.weight_polys(eng_s, np.ones((20, 5), np.int64), bud)[0, 0] as wpt:
        raw, _ = eng_s.masked_answer(1, ev.mul(ct, wpt, relin=False), bud, PRG.for_tests(3), pos)
    ct.close()
    ev.close()
    eng_c.decrypt_positions(raw, bud, pos)                  # the untouched answer decrypts
    prm = eng_c.params
    lv = bud.level - bud.drop
    n_read = eng_c.read_positions(bud, pos).size
    w0 = prm.q[0].bit_length()

    def set_bits(data, bit, width, value):
        x = int.from_bytes(data.tobytes(), "little")
        x = (x & ~(((1 << width) - 1) << bit)) | (value << bit)
        return np.frombuffer(x.to_bytes(data.size, "little"), np.uint8)

    c0_bytes = sum((n_read * q.bit_length() + 7) // 8 for q in prm.q[:lv + 1])
    if bad in ("truncated", "padded", "empty"):
        tampered = {"truncated": raw[:-1], "padded": np.concatenate([raw, np.zeros(1, np.uint8)]),
                    "empty": raw[:0]}[bad]

        def never(*a, **k):
            raise AssertionError("decrypted a frame of the wrong size")
        monkeypatch.setattr(trim_mod, "decrypt_trimmed", never)
        match = "bytes"
    elif bad == "padding-bits":
        used = n_read * w0
        assert used % 8 != 0
        tampered = set_bits(raw, used + (8 - used % 8) - 1, 1, 1)
        match = "padding"
    else:
        tampered = set_bits(raw, 0 if bad == "unreduced-c0" else 8 * c0_bytes, w0, prm.q[0])
        match = "not reduced"
    with pytest.raises(FrameError, match=match):
        eng_c.decrypt_positions(tampered, bud, pos)


@pytest.mark.parametrize("security", SECURITIES)
def test_answer_frame_is_the_rescaled_ciphertext_trimmed_byte_for_byte(security):
    """The one-call answer (``he_native.answer``: c0 divided in the coefficient domain,
    c1 through Lattigo's NTT rescale) is byte for byte the trimmed frame of the same
    masked answer rescaled one prime at a time by the evaluator, for every drop."""
    malicious = security == "malicious"
    grp, eng_c, eng_s = _engines(malicious)
    bud, _d_re, _d_im, _mat, ct, wp, ev, pos = _one_row_block(eng_c, eng_s, malicious, 9)
    assert bud.drop >= 2
    read = eng_c.read_positions(bud, pos)
    for drop in sorted({0, 1, bud.drop}):
        b = bud.__class__.__new__(bud.__class__)
        b.__dict__.update(bud.__dict__)
        b.drop = drop
        # one mask ciphertext (a semi-honest one draws Lattigo's own randomness), a copy
        # queued for each path as the offline phase queues them
        mask, rmask = eng_s.mask_ciphertext(b, PRG.for_tests(31 + drop))
        frame = mask.to_bytes()
        mask.close()
        eng_s._prepared[_mask_key(1, b)] = [(eng_s.params.load(frame, Ciphertext), rmask)]
        out, r1 = eng_s.masked_rescaled(1, ct_pt_dot(ev, [ct], [wp[0, 0]]), b, None)
        ref = trim(eng_c.params, out, read)
        out.close()
        eng_s._prepared[_mask_key(1, b)] = [(eng_s.params.load(frame, Ciphertext), rmask)]
        got, r2 = eng_s.masked_answer(1, ct_pt_dot(ev, [ct], [wp[0, 0]]), b, None, pos)
        assert got.tobytes() == ref, f"drop {drop}"
        assert r1 is r2 is rmask
    ct.close()
