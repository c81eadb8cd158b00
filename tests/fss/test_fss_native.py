"""The native FSS kernels (native/go/fss/fss_*.go, fss_aes.c) against their independent
references: the AES-MMO hash against `cryptography`'s AES (known answers), DCF keys and
evaluations against the numpy implementation (byte-identical keys, identical shares), the
gates and their serialized keys, the backend switch, and the buffer checks at the boundary."""

import hashlib
import warnings

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secinfer.crypto.fss import dcf as dcf_mod
from secinfer.crypto.fss import native
from secinfer.crypto.fss.dcf import DCFKeys, DCFParams, dcf_eval, dcf_gen
from secinfer.crypto.fss.expand import MMOHash
from secinfer.crypto.fss.gates import make_gate
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, NativeBuildError, SerializationError

pytestmark = pytest.mark.skipif(not native.available(), reason="native FSS library not built")

IMPLS = ["go"] + (["aesni"] if "aesni" in native.info() else [])


def _mmo_reference(seeds, tweaks):
    """H(s, j) = AES_K(s xor j) xor (s xor j) with `cryptography`, block by block."""
    key = hashlib.sha256(b"secinfer/fss/mmo-fixed-key/v1").digest()[:16]
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    out = np.zeros((seeds.shape[0], tweaks.shape[-1], 2), np.uint64)
    for b in range(seeds.shape[0]):
        row = tweaks if tweaks.ndim == 1 else tweaks[b]
        for i, j in enumerate(row):
            x = int(seeds[b, 0] ^ j).to_bytes(8, "little") + int(seeds[b, 1]).to_bytes(8, "little")
            y = bytes(u ^ v for u, v in zip(enc.update(x), x))
            out[b, i] = [int.from_bytes(y[:8], "little"), int.from_bytes(y[8:], "little")]
    return out


def _words(hexstr):
    raw = bytes.fromhex(hexstr)
    return [int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")]


@pytest.mark.parametrize("impl", ["default"] + IMPLS)
def test_mmo_hash_known_answers(impl):
    seeds = np.array([[0, 0], _words("000102030405060708090a0b0c0d0e0f")], np.uint64)
    got = native.mmo_hash(seeds, np.zeros(1, np.uint64), impl)
    # AES-128 under K = SHA-256("secinfer/fss/mmo-fixed-key/v1")[:16] = c54db84d...e7f2539f,
    # computed with `cryptography`: pins the key derivation and the byte order of the words.
    assert got[0, 0].tolist() == _words("6afed81d90fc6732a863fd08a7c09009")
    assert got[1, 0].tolist() == _words("a5af7a6add3eb3fc2d06e7396f395b43")
    prg = PRG.for_tests(900)
    # 23 x 7 = 161 blocks: not a multiple of the 8-block pipeline (the tail path runs too)
    s, tw, tw2 = prg.uint64((23, 2)), prg.uint64((7,)), prg.uint64((23, 7))
    want = _mmo_reference(s, tw)
    assert np.array_equal(native.mmo_hash(s, tw, impl), want)
    assert np.array_equal(native.mmo_hash(s, tw2, impl), _mmo_reference(s, tw2))
    assert np.array_equal(MMOHash().hash(s, tw), want)          # the numpy hash, same reference
    big = prg.uint64((1000, 2))
    tws = np.arange(9, dtype=np.uint64)
    assert np.array_equal(native.mmo_hash(big, tws, impl), MMOHash().hash(big, tws))


def _gen_both(params, seed, count, alpha=None):
    out = {}
    for backend in ("numpy", "native"):
        prg = PRG.for_tests(seed)
        a = prg.ring((count,), params.n) if alpha is None else alpha
        beta = params.group.random(prg, (count, params.payload))
        out[backend] = dcf_gen(params, prg, a, beta, backend=backend)
    return a, beta, out


def _same_keys(ka, kb):
    for b in (0, 1):
        for name, arr in ka[b].arrays().items():
            other = kb[b].arrays()[name]
            assert arr.dtype == other.dtype and arr.shape == other.shape, name
            assert arr.tobytes() == other.tobytes(), f"party {b} field {name}"


SHAPES = [  # (n, k, payload, entry widths, batch)
    (1, 8, 1, (), 9),
    (8, 8, 1, (), 200),
    (13, 104, 2, (), 131),
    (31, 72, 3, (72, 33, 7), 97),
    (63, 104, 6, (104, 104, 40, 104, 104, 40), 201),    # the relu-mac DCF of CRISP (n = 64)
    (64, 64, 2, (), 129),
    (64, 128, 3, (128, 1, 65), 67),
    (64, 104, 1, (), 300),
]


@pytest.mark.parametrize("n,k,payload,widths,count", SHAPES)
def test_native_dcf_equals_numpy(n, k, payload, widths, count):
    params = DCFParams(n, k, payload, widths)
    top = (1 << n) - 1
    prg = PRG.for_tests(1000 + n + k)
    alpha = np.concatenate([np.array([0, top, 1 % (top + 1), 1 << (n - 1)], np.uint64),
                            prg.ring((count - 4,), n)])
    alpha, beta, keys = _gen_both(params, 2000 + n + k, count, alpha)
    _same_keys(keys["numpy"], keys["native"])
    mask = np.uint64(top)
    pts = np.stack([alpha, (alpha - np.uint64(1)) & mask, (alpha + np.uint64(1)) & mask,
                    np.zeros_like(alpha), np.full_like(alpha, top), prg.ring((count,), n)], axis=1)
    outs = {}
    for backend in ("numpy", "native"):
        outs[backend] = [dcf_eval(keys["native"][b], pts, backend=backend) for b in (0, 1)]
        # one point per key (the shape the gates use)
        flat = [dcf_eval(keys["native"][b], pts[:, 5], backend=backend) for b in (0, 1)]
        assert all(np.array_equal(f, o[:, 5]) for f, o in zip(flat, outs[backend]))
    for b in (0, 1):
        assert np.array_equal(outs["numpy"][b], outs["native"][b])
    y = params.reduce_entries(params.group.raw.add(*outs["native"]))
    want = np.where((pts < alpha[:, None])[..., None, None], beta[:, None], np.uint64(0))
    assert np.array_equal(y, params.reduce_entries(want))


@pytest.mark.parametrize("n,k,payload,widths,count", [SHAPES[1], SHAPES[4], SHAPES[6]])
def test_kernels_agree_with_either_aes(n, k, payload, widths, count):
    """The kernels with the crypto/aes hash (the fallback where AES-NI is missing) give the
    same keys and shares as the default one."""
    params = DCFParams(n, k, payload, widths)
    prg = PRG.for_tests(2500 + n)
    alpha = prg.ring((count,), n)
    beta = params.reduce_entries(params.group.random(prg, (count, payload)))
    roots = [prg.uint64((count, 2)) & np.array([~np.uint64(1), ~np.uint64(0)], np.uint64) for _ in (0, 1)]
    gens = [native.dcf_gen(params, alpha, beta, *roots, impl=impl) for impl in ["default"] + IMPLS]
    for other in gens[1:]:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(gens[0], other))
    key = DCFKeys(params, 1, roots[1], *gens[0])
    x = prg.ring((count, 2), n)
    outs = [native.dcf_eval(key, x, impl=impl) for impl in ["default"] + IMPLS]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    assert np.array_equal(outs[0], dcf_eval(key, x, backend="numpy"))


def test_native_gen_draws_root_seeds_like_chunked_numpy(monkeypatch):
    """Batches longer than dcf.CHUNK: the numpy generator draws root seeds chunk by chunk;
    the native path draws them in the same order and so deals the same keys."""
    monkeypatch.setattr(dcf_mod, "CHUNK", 16)
    params = DCFParams(12, 72, 2)
    _, _, keys = _gen_both(params, 3000, 53)
    _same_keys(keys["numpy"], keys["native"])


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_native_results_do_not_depend_on_threads(monkeypatch, threads):
    params = DCFParams(20, 72, 2)
    prg = PRG.for_tests(3100)
    alpha = prg.ring((517,), 20)
    beta = params.group.random(prg, (517, 2))
    x = prg.ring((517, 3), 20)
    ref_keys = dcf_gen(params, PRG.for_tests(3101), alpha, beta, backend="numpy")
    ref = dcf_eval(ref_keys[1], x, backend="numpy")
    monkeypatch.setenv(native.THREADS_ENV, threads)
    keys = dcf_gen(params, PRG.for_tests(3101), alpha, beta, backend="native")
    _same_keys(ref_keys, keys)
    assert np.array_equal(dcf_eval(keys[1], x, backend="native"), ref)


GATES = [("sign", 16, 56, True, 0), ("relu", 8, 8, False, 0), ("relu", 32, 72, True, 0),
         ("relu", 64, 104, True, 0), ("ars", 32, 32, False, 13), ("ars", 64, 104, True, 13)]


@pytest.mark.parametrize("kind,n,k,mac,f", GATES)
def test_gates_native_equal_numpy(kind, n, k, mac, f):
    gate = make_gate(kind, n, k, mac=mac, frac_bits=f)
    count = 75
    res = {}
    for backend in ("numpy", "native"):
        prg = PRG.for_tests(4000 + n + k)
        mu = gate.group.random(prg, ()) if mac else None
        with native.use_backend(backend):
            k0, k1 = gate.gen(prg, count, mac_key=mu)
            xhat = prg.ring((count,), n)
            res[backend] = (k0.to_bytes(), k1.to_bytes(), gate.eval_local(k0, xhat), gate.eval_local(k1, xhat))
    a, b = res["numpy"], res["native"]
    assert a[0] == b[0] and a[1] == b[1]
    for i in (2, 3):
        assert a[i].keys() == b[i].keys()
        assert all(np.array_equal(a[i][name], b[i][name]) for name in a[i])


def test_spline_gate_native_equals_numpy():
    gate = make_gate("spline", 8, 48, mac=True, degree=0, pieces=[(-5, 17, [1]), (0, 127, [2])])
    res = {}
    for backend in ("numpy", "native"):
        prg = PRG.for_tests(4100)
        mu = gate.group.random(prg, ())
        with native.use_backend(backend):
            k0, k1 = gate.gen(prg, 40, mac_key=mu)
            xhat = prg.ring((40,), 8)
            res[backend] = (k0.to_bytes(), gate.eval_local(k0, xhat), gate.eval_local(k1, xhat))
    assert res["numpy"][0] == res["native"][0]
    for i in (1, 2):
        assert all(np.array_equal(res["numpy"][i][k], res["native"][i][k]) for k in res["numpy"][i])


# ---- boundary checks ------------------------------------------------------------------
def _small_keys():
    params = DCFParams(16, 70, 2)
    prg = PRG.for_tests(5000)
    keys = dcf_gen(params, prg, prg.ring((6,), 16), params.group.random(prg, (6, 2)), backend="native")
    return params, keys[0], prg.ring((6,), 16)


@pytest.mark.parametrize("field,bad", [
    ("seed", lambda a: a[:, :1]), ("s_cw", lambda a: a[:, :-1]), ("s_cw", lambda a: a[:-1]),
    ("t_cw", lambda a: a[:-1]), ("v_cw", lambda a: a[:, :, :-1]), ("v_cw", lambda a: a.astype(np.uint16)),
    ("final", lambda a: a[:, :1]), ("seed", lambda a: a.astype(np.int64)),
])
def test_wrong_key_buffers_rejected_before_native_code(field, bad):
    params, key, x = _small_keys()
    broken = DCFKeys(params, key.party, *(bad(getattr(key, f)) if f == field else getattr(key, f)
                                          for f in DCFKeys.FIELDS))
    with pytest.raises(SerializationError):
        dcf_eval(broken, x, backend="native")
    if field == "seed":   # one key fewer in the seeds than in the correction words
        short = DCFKeys(params, key.party, key.seed[:-1], key.s_cw, key.t_cw, key.v_cw, key.final[:-1])
        with pytest.raises(SerializationError):
            dcf_eval(short, x[:-1], backend="native")


def test_bad_points_and_party_rejected():
    params, key, x = _small_keys()
    with pytest.raises(ConfigError):
        dcf_eval(key, x[:-1], backend="native")
    with pytest.raises(ConfigError):
        dcf_eval(key, np.full(6, 1 << 16, np.uint64), backend="native")
    with pytest.raises(ConfigError):
        native.dcf_eval(key, x)                      # the binding wants (B, M) points
    bad_party = DCFKeys(params, 2, key.seed, key.s_cw, key.t_cw, key.v_cw, key.final)
    with pytest.raises(SerializationError):
        native.dcf_eval(bad_party, x[:, None])
    with pytest.raises(ConfigError):
        dcf_gen(params, PRG.for_tests(1), np.array([1 << 16], np.uint64), params.group.zeros((1, 2)),
                backend="native")


def test_non_contiguous_inputs_are_copied_not_misread():
    params, key, x = _small_keys()
    strided = DCFKeys(params, key.party, key.seed, np.asfortranarray(key.s_cw), key.t_cw, key.v_cw, key.final)
    assert np.array_equal(dcf_eval(strided, x, backend="native"), dcf_eval(key, x, backend="numpy"))
    x2 = np.stack([x, x], axis=1)[:, ::2]
    assert np.array_equal(dcf_eval(key, x2, backend="native"), dcf_eval(key, x2, backend="numpy"))


def test_library_checks_lengths_itself():
    """The Go side re-checks every length (a caller that bypassed the Python checks)."""
    import ctypes as C
    params, key, x = _small_keys()
    bits = np.asarray(params.bits, np.int32)
    out = np.zeros((6, 1, 2, 2), np.uint64)
    x = np.ascontiguousarray(x)
    p = native._p
    args = [params.n, params.out_bits, params.payload, p(bits, native.P_i32), bits.size, 0, 6, 1,
            p(key.seed, native.P_u64), key.seed.size, p(key.s_cw, native.P_u64), key.s_cw.size,
            p(key.t_cw, native.P_u8), key.t_cw.size, p(key.v_cw, native.P_u8), key.v_cw.size,
            p(key.final, native.P_u64), key.final.size, p(x, native.P_u64), x.size, p(out, native.P_u64),
            out.size, 1, 0]
    native._call("fss_dcf_eval", *args)                  # the honest call works
    assert np.array_equal(out[:, 0], dcf_eval(key, x, backend="numpy"))
    for idx in (9, 11, 13, 15, 17, 19, 21):              # each length one element short
        bad = list(args)
        bad[idx] = args[idx] - 1
        with pytest.raises(ConfigError, match="buffer holds"):
            native._call("fss_dcf_eval", *bad)
    bad = list(args)
    bad[4] = 1                                           # entry widths of the wrong count
    with pytest.raises(ConfigError):
        native._call("fss_dcf_eval", *bad)
    with pytest.raises(ConfigError):
        native._call("fss_mmo_hash", p(key.seed, native.P_u64), 6, p(key.seed, native.P_u64), 2, 0,
                     p(out, native.P_u64), 5, 0)
    del C


# ---- backend selection --------------------------------------------------------------------
def test_backend_selection(monkeypatch):
    monkeypatch.delenv(native.BACKEND_ENV, raising=False)
    assert native.resolve() == "native"
    monkeypatch.setenv(native.BACKEND_ENV, "numpy")
    assert native.resolve() == "numpy"
    with native.use_backend("native"):
        assert native.resolve() == "native"
        assert native.resolve("numpy") == "numpy"
    monkeypatch.setenv(native.BACKEND_ENV, "fast")
    with pytest.raises(ConfigError):
        native.resolve()
    with pytest.raises(ConfigError):
        with native.use_backend("gpu"):
            pass


def test_missing_library_falls_back_or_raises(monkeypatch):
    monkeypatch.delenv(native.BACKEND_ENV, raising=False)
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_load_error", NativeBuildError("no Go toolchain (simulated)"))
    monkeypatch.setattr(native, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert native.resolve() == "numpy"
    assert any("no Go toolchain" in str(w.message) for w in caught)
    assert not native.available()
    with pytest.raises(NativeBuildError, match="no Go toolchain"):
        native.resolve("native")
    params = DCFParams(8, 8, 1)
    prg = PRG.for_tests(6000)
    k0, _ = dcf_gen(params, prg, prg.ring((3,), 8), params.group.zeros((3, 1)))   # numpy, still works
    assert k0.count == 3


def test_missing_c_compiler_is_a_clear_build_error(monkeypatch):
    from secinfer.native import build
    monkeypatch.setenv("CC", "no-such-c-compiler-here")
    with pytest.raises(NativeBuildError, match="C compiler"):
        build.find_cc()


def test_key_buffer_is_the_serialized_format():
    """GateKey.to_buffer (what the dealer sends) holds exactly the bytes of the documented
    format: meta, then every field's little-endian bytes in field order."""
    from secinfer.crypto.fss.gates import GateKey
    gate = make_gate("ars", 32, 72, mac=True, frac_bits=13)
    prg = PRG.for_tests(7000)
    k0, _ = gate.gen(prg, 33, mac_key=gate.group.random(prg, ()))
    want = b"".join(np.ascontiguousarray(a, dtype=np.dtype(a.dtype).newbyteorder("<")).tobytes()
                    for a in k0.ordered_arrays())
    buf = k0.to_buffer()
    assert buf.dtype == np.uint8 and buf.ndim == 1 and buf.tobytes() == want == k0.to_bytes()
    back = GateKey.from_bytes(buf, expect=gate, party=0)
    assert back.to_bytes() == want
