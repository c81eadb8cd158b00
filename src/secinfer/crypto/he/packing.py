"""Fast LWE <-> RLWE conversion for SAFHIRE: partial trace extraction at depth gamma,
exact integer linear layers on the extracted LWE batch, and tree packing with automorphism
key switches.  [SAFHIRE Sec. 2.3-2.4, 4.3-4.4, Table 1]

The round trip of one linear layer (all integers; ``delta`` = 2^log_delta, see
:data:`PROFILES`)::

    from secinfer.crypto.he import packing as pk
    prof = pk.profile(b=8)                       # parameter set + scale for b-bit accumulators
    P = prof.params()
    kp = P.keygen()
    keys = P.gen_eval_keys(kp.sk, relin=False, galois=pk.pack_galois_elements(P, gamma))
    ev = he.Evaluator(P, keys)
    # client [SAFHIRE Sec. 4.3]: one chunk = N integers; encrypt m(X^d) for every d in D_gamma
    chunk = pk.encrypt_powers(P, x_int, kp.sk, prof.input_log_scale(gamma), gamma)
    # server [SAFHIRE Sec. 4.4]: extract, linear layer, shuffle, pack
    batch = pk.extract(P, [chunk], coeffs=np.arange(n), gamma=gamma)   # LWEArrays
    y = pk.lwe_linear(batch, W_int, bias_int, threads=2)                # exact mod q
    y = y.select(perm)                                                   # shuffle
    ct, ks = pk.pack(ev, y, threads=2)                                   # ks key switches
    # client: round(dec / delta) = W x + bias exactly
    out = pk.decode(P, ct, kp.sk, prof.log_delta)[: len(y)]

Extraction depth gamma (the paper's partial trace extraction level). Lattigo's rings are
power-of-two cyclotomics (M = 2N, t = 2). The packing tree has logN levels; level
k = i + 1 merges positions that differ by N/2^(i+1) using the automorphism
X -> X^(g_i), g_0 = 2N - 1, g_i = 5^(2^(i-1)). With gamma > 0 the client also encrypts
m(X^d) for every d in D_gamma (products of subsets of g_0 .. g_(gamma-1); 2^gamma
polynomials per chunk, :func:`pretrace_elements`), so the server computes the first gamma
levels of the trace without key switching (Lemma 1 of the paper, for t = 2), and packing N
values costs N/2^gamma - 1 key switches: 1, 1/2 and 1/4 per coefficient for gamma = 0, 1, 2
(the paper, prime-power rings: 2.5-4.16, 1.16-1.5, 0.16-0.5; docs/he.md compares). In the
paper's tower for t = 2 the first extension K_1/K_0 has degree t - 1 = 1; we count
gamma in levels of degree 2 instead, so that gamma = 1 and 2 each halve the key switches.

The extracted batch (:class:`LWEArrays`) is ring form, per RNS limb l of the level:
``a[t, l, :]`` is the c1 polynomial (coefficient domain) and ``b[t, l, k]`` is coefficient
k N / 2^gamma of c0, k < 2^gamma, of an RLWE ciphertext whose decryption's coefficients at
those positions carry member t's payload (position 0: 2^gamma * scale_in * x, the rest
noise). For gamma = 0 that is an LWE ciphertext: b + <a~, s> = payload + e with
a~_0 = a_0, a~_j = -a_(N-j) (:meth:`LWEArrays.lwe_vectors`). Any integer linear map on
members applies to b and a alike (mod q_l), which is what :func:`lwe_linear` does.

Scale: the payload of every member (and of the packed output) is ``2^log_scale * value``;
:func:`extract` returns ``log_scale = input log scale + gamma``.

Noise: packing adds one key-switch noise per tree level (the operands of each
key-switched merge are halved mod Q, so earlier key-switch noise is not doubled by later
levels); :func:`pipeline_noise` measures extraction -> linear -> packing against
delta / 2 (= the paper's q/(2p) for q = p delta).
"""

from __future__ import annotations

import ctypes as C
from dataclasses import dataclass

import numpy as np

from secinfer.native import lib as N
from secinfer.crypto.he.errors import HEArgumentError
from secinfer.crypto.he.evaluator import Evaluator
from secinfer.crypto.he.objects import Ciphertext, PublicKey, SecretKey
from secinfer.crypto.he.params import CKKSParams, get_params

MAX_GAMMA = 2   # the paper's levels; the Go layer accepts up to 4


def _gamma(gamma) -> int:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or not 0 <= gamma <= MAX_GAMMA:
        raise HEArgumentError(f"extraction level gamma must be 0, 1 or 2, got {gamma!r}")
    return int(gamma)


def _threads(threads) -> int:
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= 64:
        raise HEArgumentError(f"threads must be an integer in [1, 64], got {threads!r}")
    return int(threads)


def _elements(params: CKKSParams, gamma: int, kind: int) -> list[int]:
    out = np.zeros(64, dtype=np.uint64)
    n = C.c_int(0)
    N.call("he_fp_elements", params.handle, _gamma(gamma), kind, N.ptr(out, N.u64), len(out), C.byref(n))
    return [int(v) for v in out[: n.value]]


def pack_galois_elements(params: CKKSParams, gamma: int = 0) -> list[int]:
    """Galois elements whose keys :func:`pack` needs at extraction level ``gamma``
    (logN - gamma keys; pass them as ``gen_eval_keys(..., galois=...)``)."""
    return _elements(params, gamma, 0)


def pretrace_elements(params: CKKSParams, gamma: int) -> list[int]:
    """D_gamma: the client encrypts m(X^d) for each d, in this order (2^gamma entries,
    the first is 1)."""
    return _elements(params, gamma, 1)


def automorph_coeffs(values: np.ndarray, d: int) -> np.ndarray:
    """Coefficients of m(X^d) mod X^N + 1 from those of m (integers, any signed dtype)."""
    v = np.asarray(values)
    n = v.shape[-1]
    e = (np.arange(n, dtype=np.int64) * int(d)) % (2 * n)
    out = np.zeros_like(v)
    sign = np.where(e >= n, -1, 1).astype(v.dtype)
    out[..., e % n] = v * sign
    return out


def encrypt_powers(params: CKKSParams, values, key: PublicKey | SecretKey, log_scale: int,
                   gamma: int, level: int = 0) -> list[Ciphertext]:
    """Client side [SAFHIRE Sec. 4.3 "Power computations"]: encryptions of
    2^log_scale * m(X^d) for every d in D_gamma, m = sum_j values[j] X^j (integers,
    len(values) <= N, zero padded). The list is one extraction chunk."""
    from secinfer.crypto.he.rlwe import coeff_encrypt

    v = np.asarray(values)
    if v.ndim != 1 or len(v) > params.n:
        raise HEArgumentError(f"a chunk holds at most N = {params.n} values (1-d)")
    if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
        raise HEArgumentError("chunk values must be integers")
    if np.max(np.abs(v), initial=0) * 2.0 ** log_scale >= 2.0 ** 53:
        raise HEArgumentError("values * 2^log_scale must stay below 2^53 (exact float64 encoding)")
    m = np.zeros(params.n, dtype=np.int64)
    m[: len(v)] = v.astype(np.int64)
    return [coeff_encrypt(params, automorph_coeffs(m, d).astype(np.float64), key, 2.0 ** log_scale, level)
            for d in pretrace_elements(params, gamma)]


@dataclass
class LWEArrays:
    """A batch of (partially traced) LWE ciphertexts in ring form, owned by numpy (see the
    module docstring): ``b`` uint64 (count, L, 2^gamma), ``a`` uint64 (count, L, N), every
    residue of limb l reduced mod q_l; payload scale 2^log_scale."""

    params: CKKSParams
    b: np.ndarray
    a: np.ndarray
    gamma: int
    log_scale: int

    def __post_init__(self) -> None:
        P = self.params
        self.gamma = _gamma(self.gamma)
        if self.b.dtype != np.uint64 or self.a.dtype != np.uint64:
            raise HEArgumentError("b and a must be uint64 arrays")
        if self.b.ndim != 3 or self.a.ndim != 3 or self.a.shape[2] != P.n:
            raise HEArgumentError(f"b must be (count, L, 2^gamma) and a (count, L, {P.n})")
        cnt, L = self.a.shape[:2]
        if self.b.shape != (cnt, L, 1 << self.gamma) or not 1 <= L <= len(P.q):
            raise HEArgumentError("b and a shapes disagree (count, level or gamma)")

    def __len__(self) -> int:
        return self.a.shape[0]

    @property
    def level(self) -> int:
        return self.a.shape[1] - 1

    @property
    def moduli(self) -> tuple[int, ...]:
        return self.params.q[: self.level + 1]

    def check_reduced(self) -> None:
        for l, q in enumerate(self.moduli):
            if np.any(self.b[:, l] >= q) or np.any(self.a[:, l] >= q):
                raise HEArgumentError(f"residues not reduced modulo q_{l}")

    def select(self, idx) -> "LWEArrays":
        """Members in the order ``idx`` (a permutation for shuffling; repeats allowed)."""
        i = np.asarray(idx, dtype=np.int64).reshape(-1)
        if i.size and (i.min() < 0 or i.max() >= len(self)):
            raise HEArgumentError(f"member index out of [0, {len(self)})")
        return LWEArrays(self.params, self.b[i], self.a[i], self.gamma, self.log_scale)

    def lwe_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        """gamma = 0 only: the classic LWE form (b (count, L), a~ (count, L, N)) with
        b + <a~, s> = payload + e mod q_l."""
        if self.gamma != 0:
            raise HEArgumentError("classic LWE vectors exist for gamma = 0 only")
        a = self.a
        q = np.asarray(self.moduli, dtype=np.uint64)[None, :, None]
        at = np.empty_like(a)
        at[..., 0] = a[..., 0]
        at[..., 1:] = (q - a[..., :0:-1]) % q
        return self.b[..., 0].copy(), at


def extract(params: CKKSParams, chunks, coeffs, chunk_of=None, gamma: int = 0,
            threads: int = 1) -> LWEArrays:
    """Partial trace extraction [SAFHIRE Sec. 4.4, Lemma 1]: member t is coefficient
    ``coeffs[t]`` of chunk ``chunk_of[t]`` (default 0). ``chunks`` is a list of chunks, each
    the list of 2^gamma ciphertexts from :func:`encrypt_powers` (same level). No key
    switch; cost ~2^gamma N per member. Returns payload scale 2^(log2 input scale + gamma)."""
    g = _gamma(gamma)
    th = _threads(threads)
    if not chunks:
        raise HEArgumentError("no chunks to extract from")
    hs = []
    level = None
    log_scale = None
    for c in chunks:
        if len(c) != 1 << g:
            raise HEArgumentError(f"each chunk needs 2^gamma = {1 << g} ciphertexts, got {len(c)}")
        for ct in c:
            hs.append(params._own(ct, "ciphertext"))
            if level is None:
                level, log_scale = ct.level, ct.log_scale
    idx = np.ascontiguousarray(coeffs, dtype=np.int64).reshape(-1)
    ch = (np.zeros(len(idx), dtype=np.int64) if chunk_of is None
          else np.ascontiguousarray(chunk_of, dtype=np.int64).reshape(-1))
    if ch.shape != idx.shape:
        raise HEArgumentError("chunk_of and coeffs must have the same length")
    ls = int(round(log_scale))
    if abs(log_scale - ls) > 1e-9:
        raise HEArgumentError("extraction needs a power-of-two input scale")
    L = level + 1
    b = np.empty((len(idx), L, 1 << g), dtype=np.uint64)     # the Go layer writes every entry
    a = np.empty((len(idx), L, params.n), dtype=np.uint64)
    harr = np.ascontiguousarray(hs, dtype=np.uint64)
    N.call("he_fp_extract", params.handle, g, level, N.ptr(harr, N.u64), len(chunks),
           N.ptr(ch, N.i64), N.ptr(idx, N.i64), len(idx), N.ptr(b, N.u64), N.ptr(a, N.u64), th)
    return LWEArrays(params, b, a, g, ls + g)


def pack(ev: Evaluator, batch: LWEArrays, positions=None, threads: int = 1) -> tuple[Ciphertext, int]:
    """Fast packing [SAFHIRE Sec. 4.4]: one RLWE ciphertext whose coefficient
    ``positions[t]`` encrypts member t's payload (scale 2^batch.log_scale) and whose other
    coefficients encrypt 0; returns it with the number of key switches made. Default
    positions: 0 .. count-1 when count = N, else :func:`spread_positions` (stride
    N / 2^ceil(log2 count), the cheapest layout). Needs the Galois keys of
    :func:`pack_galois_elements` (batch.gamma). ``threads`` workers share the tree."""
    from secinfer.crypto.he.rlwe import spread_positions

    params = ev.params
    params.require_same(batch.params)
    th = _threads(threads)
    n = len(batch)
    if n < 1 or n > params.n:
        raise HEArgumentError(f"cannot pack {n} members into {params.n} coefficients")
    pos = spread_positions(n, params.n) if positions is None else np.asarray(positions)
    pos = np.ascontiguousarray(pos, dtype=np.int64).reshape(-1)
    if pos.shape != (n,):
        raise HEArgumentError("need one position per member")
    b = np.ascontiguousarray(batch.b, dtype=np.uint64)
    a = np.ascontiguousarray(batch.a, dtype=np.uint64)
    ks = C.c_int(0)
    h = N.new_handle("he_fp_pack", params.handle, ev.handle, batch.level, batch.gamma, n,
                     N.ptr(b, N.u64), N.ptr(a, N.u64), N.ptr(pos, N.i64), float(batch.log_scale),
                     th, C.byref(ks))
    return Ciphertext(params, h), int(ks.value)


def expected_key_switches(log_n: int, count: int, gamma: int) -> int:
    """Key switches of :func:`pack` for ``count`` members at the default positions:
    (2^l' - 1) + (logN - l) with l = ceil(log2 count), l' = l - gamma (logN - gamma when
    l <= gamma). count = N: N / 2^gamma - 1."""
    g = _gamma(gamma)
    l = max(0, (count - 1).bit_length())
    if g >= l:
        return log_n - g
    return (1 << (l - g)) - 1 + log_n - l


# ---------------------------------------------------------------- exact linear layers


def _is_sparse(W) -> bool:
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scikit-learn pulls scipy in
        return False
    return sp.issparse(W)


def _weight_digits(W) -> list:
    """W = sum_j W_j 2^(16 j) with W_j in [0, 2^16) except the last (signed, |.| < 2^16),
    as float64 matrices (dense, or CSR with W's sparsity when W is a scipy sparse matrix)."""
    if _is_sparse(W):
        import scipy.sparse as sp

        Wc = sp.csr_matrix(W, dtype=np.int64)
        Wc.sum_duplicates()
        rest = Wc.data.astype(np.int64)

        def mk(vals):
            return sp.csr_matrix((vals.astype(np.float64), Wc.indices, Wc.indptr), shape=Wc.shape)
    else:
        rest = np.asarray(W, dtype=np.int64)

        def mk(vals):
            return vals.astype(np.float64)
    out = []
    while True:
        if int(np.max(np.abs(rest), initial=0)) < 1 << 16 or len(out) == 3:
            out.append(mk(rest))
            return out
        lo = rest & 0xFFFF
        out.append(mk(lo))
        rest = (rest - lo) >> 16


def _matmul_mod(W, X: np.ndarray, q: int, threads: int) -> np.ndarray:
    """(W @ X) mod q exactly, W int64 (m, E) dense or scipy sparse, X uint64 (E, C) with
    entries < q < 2^61. Float64 BLAS (or sparse products) on 16-bit limbs of X and W (every
    partial sum below 2^53), then a Horner recombination mod q that never overflows int64."""
    m, E = W.shape
    if q >= 1 << 61:
        raise HEArgumentError("moduli of 61 bits or more are not supported by lwe_linear")
    per_row = (int(np.diff(W.tocsr().indptr).max(initial=0)) if _is_sparse(W) else E)
    if per_row >= 1 << 20:
        raise HEArgumentError("linear layers with 2^20 or more inputs per output are not supported")
    wdig = _weight_digits(W)
    xdig = [((X >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.float64) for k in range(4)]
    nd = len(wdig) + 3
    qi = np.int64(q)

    def block(cols: slice) -> np.ndarray:
        acc = np.zeros((m, cols.stop - cols.start), dtype=np.int64)
        for s in range(nd - 1, -1, -1):
            part = np.zeros_like(acc)
            for j, wd in enumerate(wdig):
                k = s - j
                if 0 <= k < 4:
                    # |W_j| < 2^16, X_k < 2^16, E < 2^20: |product| < 2^52, exact
                    part += np.mod(np.asarray(wd @ xdig[k][:, cols]).astype(np.int64), qi)
            acc = _mul_pow2_mod(acc, q, 16)
            acc = np.mod(acc + np.mod(part, qi), qi)
        return acc

    return _with_blas_threads(threads, lambda: block(slice(0, X.shape[1]))).astype(np.uint64)


def _with_blas_threads(threads: int, fn):
    """Run fn with the BLAS pool limited to ``threads`` (threadpoolctl, a scikit-learn
    dependency; without it BLAS keeps its own default)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn pulls it in
        return fn()
    with threadpool_limits(limits=threads, user_api="blas"):
        return fn()


def _mul_pow2_mod(acc: np.ndarray, q: int, bits: int) -> np.ndarray:
    """acc * 2^bits mod q for int64 acc in [0, q), q < 2^61, without int64 overflow:
    8-bit steps when q < 2^55, else one-bit doublings with a conditional subtraction."""
    qi = np.int64(q)
    if q < 1 << 55:
        for _ in range(bits // 8):
            acc = np.mod(acc << 8, qi)
        return acc
    for _ in range(bits):
        acc = acc << 1
        acc = np.where(acc >= qi, acc - qi, acc)
    return acc


def lwe_linear(batch: LWEArrays, W, bias=None, threads: int = 1) -> LWEArrays:
    """Out member o = sum_i W[o, i] member i (+ bias[o] at the batch's payload scale),
    exactly mod every q_l [SAFHIRE Sec. 4.4 "Convolution": one batched integer matrix
    product over the extracted ciphertexts]. W: integer matrix (out, len(batch)), dense or
    a scipy.sparse matrix (a convolution's Toeplitz matrix: cost ~ its non-zeros), |W| < 2^47; bias: integers (out,), |bias| * 2^log_scale < 2^62. Float64 BLAS on 16-bit
    limbs (never numpy integer matmul); ``threads`` is the BLAS thread count."""
    th = _threads(threads)
    if _is_sparse(W):            # e.g. a convolution's (out, in) matrix: scipy.sparse
        Wi = W.tocsr()
        vals = Wi.data
        if Wi.shape[1] != len(batch):
            raise HEArgumentError(f"W must be (out, {len(batch)})")
    else:
        Wa = np.asarray(W)
        if Wa.ndim != 2 or Wa.shape[1] != len(batch):
            raise HEArgumentError(f"W must be (out, {len(batch)})")
        Wi = vals = Wa
    if not np.issubdtype(vals.dtype, np.integer):
        if not np.all(np.isfinite(vals)) or np.any(vals != np.round(vals)):
            raise HEArgumentError("W must hold integers")
    if vals.size and float(np.max(np.abs(vals))) >= 2.0 ** 47:
        raise HEArgumentError("|W| must stay below 2^47")
    if not _is_sparse(Wi):
        Wi = Wi.astype(np.int64)
    m = Wi.shape[0]
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (m,) or (not np.issubdtype(bias.dtype, np.integer)
                                  and np.any(bias != np.round(bias))):
            raise HEArgumentError(f"bias must be {m} integers")
        bias = bias.astype(np.int64)
        if bias.size and int(np.max(np.abs(bias))) * 2 ** batch.log_scale >= 2 ** 62:
            raise HEArgumentError("bias * 2^log_scale must stay below 2^62")
    G, n = batch.b.shape[2], batch.params.n
    out_b = np.empty((m, batch.level + 1, G), dtype=np.uint64)
    out_a = np.empty((m, batch.level + 1, n), dtype=np.uint64)
    for l, q in enumerate(batch.moduli):
        X = np.concatenate([batch.b[:, l, :], batch.a[:, l, :]], axis=1)
        Y = _matmul_mod(Wi, X, q, th)
        if bias is not None:
            d = pow(2, batch.log_scale, q)
            y0 = Y[:, 0].astype(object)
            Y[:, 0] = np.array([(int(v) + int(bv) * d) % q for v, bv in zip(y0, bias)], dtype=np.uint64)
        out_b[:, l, :] = Y[:, :G]
        out_a[:, l, :] = Y[:, G:]
    return LWEArrays(batch.params, out_b, out_a, batch.gamma, batch.log_scale)


# ---------------------------------------------------------------- decoding and noise


def decrypt_centered(params: CKKSParams, ct: Ciphertext, sk: SecretKey) -> np.ndarray:
    """The decryption's coefficients as centred integers mod Q_level (int64 when Q_level
    < 2^63, else Python ints in an object array). Key owner only."""
    with params.decrypt(ct, sk) as pt:
        res = params._poly(pt, 0)
    L = res.shape[0]
    if L == 1:
        q = params.q[0]
        v = res[0].astype(np.int64) if q < 1 << 63 else res[0].astype(object)
        return np.where(v > q // 2, v - q, v)
    Q = params.q_level(L - 1)
    out = np.empty(params.n, dtype=object)
    for j in range(params.n):
        x = 0
        for l in range(L):
            q = params.q[l]
            Ql = Q // q
            x += int(res[l, j]) * Ql * pow(Ql, -1, q)
        x %= Q
        out[j] = x - Q if x > Q // 2 else x
    if Q < 1 << 62:
        out = out.astype(np.int64)
    return out


def decode(params: CKKSParams, ct: Ciphertext, sk: SecretKey, log_scale: int) -> np.ndarray:
    """Client side: round(decryption / 2^log_scale) per coefficient (int64)."""
    v = decrypt_centered(params, ct, sk)
    d = 1 << int(log_scale)
    if v.dtype == object:
        return np.array([(int(x) + d // 2) // d for x in v], dtype=np.int64)
    return np.floor_divide(v + d // 2, d).astype(np.int64)


# ---------------------------------------------------------------- parameter profiles


@dataclass(frozen=True)
class PackingProfile:
    """Parameters for b-bit accumulators [SAFHIRE Table 2]: the set, and the output scale
    delta = 2^log_delta with delta * 2^b <= q_0 (so signed b-bit values decode exactly
    when the noise stays below delta / 2 = q_0 / (2 p), p = q_0 / delta >= 2^b)."""

    b: int
    params_name: str
    log_delta: int

    def params(self) -> CKKSParams:
        return get_params(self.params_name)

    def input_log_scale(self, gamma: int) -> int:
        """The client's encoding scale at level gamma (the payload gains 2^gamma)."""
        return self.log_delta - _gamma(gamma)


def _log_delta(params_name: str, b: int) -> int:
    q0 = get_params(params_name).q[0]
    return q0.bit_length() - 1 - b


# [SAFHIRE Table 2]: one ring and prime, finer key-switching digits as b grows (the paper's
# gadget D shrinks from b = 12 to b = 16 at the same noise level): 2, 3 and 5 digits
PROFILE_SETS = {8: "rlwe-n11-q53-w27-128", 12: "rlwe-n11-q53-w18-128", 16: "rlwe-n11-q53-w11-128"}


def profile(b: int, params_name: str | None = None) -> PackingProfile:
    """The profile for accumulator precision b in {8, 12, 16} (or any b with an explicit
    ``params_name``, e.g. an ``insecure`` test set)."""
    if params_name is None:
        if b not in PROFILE_SETS:
            raise HEArgumentError(f"accumulator precision b must be 8, 12 or 16, got {b!r}")
        params_name = PROFILE_SETS[b]
    if not isinstance(b, int) or not 2 <= b <= 40:
        raise HEArgumentError(f"accumulator precision b out of range: {b!r}")
    ld = _log_delta(params_name, b)
    if ld < 8:
        raise HEArgumentError(f"{params_name} leaves no room for {b}-bit values")
    return PackingProfile(b, params_name, ld)


def pipeline_noise(prof: PackingProfile, kp, ev: Evaluator, gamma: int, x: np.ndarray,
                   W: np.ndarray, bias=None, threads: int = 1) -> np.ndarray:
    """One run of encrypt_powers -> extract -> lwe_linear -> pack -> decrypt; returns the
    noise dec - delta (W x + bias) at the packed positions (int64 / object), to compare
    with delta / 2 (tests and ``secinfer bench he``; needs the secret key)."""
    P = prof.params()
    want = _int_matvec(np.asarray(W, dtype=np.int64), np.asarray(x, dtype=np.int64))
    if bias is not None:
        want = want + np.asarray(bias, dtype=object)
    if len(want) and max(abs(int(v)) for v in want) >= 1 << (prof.b - 1):
        raise HEArgumentError(f"W x + bias leaves the {prof.b}-bit accumulator range (it would wrap mod q)")
    chunk = encrypt_powers(P, x, kp.sk, prof.input_log_scale(gamma), gamma)
    try:
        batch = extract(P, [chunk], np.arange(len(x)), gamma=gamma, threads=threads)
    finally:
        for c in chunk:
            c.close()
    y = lwe_linear(batch, W, bias, threads=threads)
    ct, _ = pack(ev, y, threads=threads)
    with ct:
        dec = decrypt_centered(P, ct, kp.sk)
    from secinfer.crypto.he.rlwe import spread_positions

    pos = spread_positions(len(y), P.n) if len(y) != P.n else np.arange(P.n)
    return (dec[pos].astype(object) - want * (1 << prof.log_delta)).astype(np.int64)


def _int_matvec(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """W @ x over the integers (object array): float64 when provably exact, else Python ints."""
    bound = float(np.max(np.abs(W), initial=0)) * float(np.max(np.abs(x), initial=0)) * max(1, W.shape[1])
    if bound < 2.0 ** 53:
        return (W.astype(np.float64) @ x.astype(np.float64)).astype(np.int64).astype(object)
    return W.astype(object) @ x.astype(object)
