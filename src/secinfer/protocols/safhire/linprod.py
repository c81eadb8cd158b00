"""The server's exact integer product W X mod q on extracted LWE ciphertexts
[SAFHIRE Sec. 4.4 step 8: "one batched integer matrix product"], fast.

X holds one LWE ciphertext per row (G + N residues mod q, the columns); W is the round's
integer map (scipy sparse, one block per source). The product is computed in float64 on
limbs of X's residues and recombined mod q:

* limbs: every residue x < q is cut into ``nl`` limbs of ``lb`` bits, with lb the widest
  width such that (row l1-norm of W) * 2^lb <= 2^53: every partial sum of every product
  below is then an exact integer in float64, in any summation order (BLAS blocks
  freely). For ResNet-20's small weights and a 53-bit q that is two limbs (three before).
* convolution blocks: a block whose matrix is a 2-D convolution (any kernel, stride,
  zero padding; average pooling, a 1x1 shortcut and a composed conv + batch norm are
  convolutions too) is found by reading its kernel back from the matrix and checking it:
  W = conv(K) + D exactly, D sparse (usually empty). The convolution is applied as dense
  float64 GEMMs (im2col by bands of output rows whose patches stay near PATCH_BYTES, the
  LWE columns acting as the batch); D (if any) by the sparse product. Used only where the
  dense work is at most ``DENSE_FACTOR`` times the block's non-zeros (an identity shortcut
  stays sparse).
* dense blocks (a fully connected layer of an MLP): one GEMM; all-zero blocks: skipped.
* anything else: scipy's sparse product (the generic fallback).
* the columns are cut into tiles of COL_TILE that run from limbs to products to residues
  on their own, in work buffers reused from tile to tile (a fresh large buffer costs a
  page fault per 4 KiB); the recombination mod q needs no division for primes
  q = 2^k + d with small |d| (every prime of the rings in use here), and falls back to
  shifts and ``%`` otherwise.

``ProductPlan`` is built once per round (the map is fixed) and applied to every sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from secinfer.errors import ConfigError
from secinfer.ir.convmap import ConvMap, Pool

EXACT_BITS = 53          # float64 integers are exact below 2^53
COL_TILE = 32            # LWE columns per tile (each tile: limbs, products, recombination)
PATCH_BYTES = 1 << 21    # im2col patch bytes per GEMM (a row band of output positions)
DENSE_FACTOR = 3.0       # dense GEMM work allowed per non-zero (GEMM is ~3x a sparse MAC)
MAX_KERNEL = 16          # kernel side read back from a matrix
ROW_ELEMS = 1 << 16      # values per row block of the elementwise passes (cache-sized)


@dataclass
class Conv:
    """A block equal to conv(kernel) + resid: input (ci, h, w), output (co, ho, wo)."""

    kernel: np.ndarray          # float64 (co, ci * kh * kw)
    kh: int
    kw: int
    stride: tuple
    pad: tuple
    in_shape: tuple
    out_shape: tuple
    resid: sp.csr_matrix | None  # float64, exact correction (None: W == conv(kernel))
    pre: Pool | None = None      # an integer sum pooling run first (its output: in_shape)


@dataclass
class Block:
    start: int                  # first input column of the block (sources are hstacked)
    width: int
    conv: Conv | None = None
    dense: np.ndarray | None = None      # float64 (m, width)
    sparse: sp.csr_matrix | None = None  # float64

    zero: bool = False                   # all weights zero: the source is not read at all

    @property
    def kind(self) -> str:
        if self.zero:
            return "zero"
        return "conv" if self.conv is not None else ("dense" if self.dense is not None else "sparse")


@dataclass
class ProductPlan:
    m: int
    n: int
    l1: int                     # max row l1-norm of W (all blocks)
    blocks: list

    def limbs(self, q: int) -> tuple[int, int]:
        """(limb count, limb bits) for residues mod q: l1 * (2^lb - 1) < 2^53."""
        need = max(1, int(self.l1)).bit_length()           # l1 < 2^need
        lb = EXACT_BITS - need
        if lb < 8:
            raise ConfigError(f"weights too large for the exact product (row l1-norm {self.l1})")
        qb = int(q - 1).bit_length()
        nl = -(-qb // lb)
        return nl, -(-qb // nl)

    def kinds(self) -> list[str]:
        return [b.kind for b in self.blocks]


# ---------------------------------------------------------------- planning
def _conv_matrix(k4: np.ndarray, in_shape, out_shape, stride, pad) -> sp.csr_matrix:
    """The (co*ho*wo, ci*h*w) matrix of a zero-padded 2-D convolution with kernel k4."""
    return ConvMap(np.asarray(k4, dtype=np.int64), stride, pad, in_shape, out_shape).tocsr()


def find_conv(w: sp.csr_matrix, in_shape, out_shape) -> Conv | None:
    """Read a convolution kernel back from w (int64) and check it: w = conv(K) + resid
    exactly. None when w does not look like a convolution between these shapes."""
    if in_shape is None or out_shape is None or len(in_shape) != 3 or len(out_shape) != 3:
        return None
    ci, h, wd = (int(a) for a in in_shape)
    co, ho, wo = (int(a) for a in out_shape)
    if w.shape != (co * ho * wo, ci * h * wd) or w.nnz == 0:
        return None
    coo = w.tocoo()
    r, c, v = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.int64)
    o_c, rest = np.divmod(r, ho * wo)
    o_y, o_x = np.divmod(rest, wo)
    i_c, rest = np.divmod(c, h * wd)
    i_y, i_x = np.divmod(rest, wd)
    sy, sx = max(1, round(h / ho)), max(1, round(wd / wo))
    dy, dx = i_y - o_y * sy, i_x - o_x * sx
    py, px = int(-dy.min()), int(-dx.min())
    kh, kw = int(dy.max()) + py + 1, int(dx.max()) + px + 1
    if py < 0 or px < 0 or kh > MAX_KERNEL or kw > MAX_KERNEL:
        return None
    key = ((o_c * ci + i_c) * kh + (dy + py)) * kw + (dx + px)
    # the kernel: per tap the most frequent value (border effects and float noise in the
    # quantizer's probes may leave a few entries off; they go into resid)
    order = np.lexsort((v, key))
    ks, vs = key[order], v[order]
    new = np.ones(len(ks), dtype=bool)
    new[1:] = (ks[1:] != ks[:-1]) | (vs[1:] != vs[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(ks)))
    run_key, run_val = ks[starts], vs[starts]
    best = np.lexsort((-counts, run_key))                  # per key, the longest run first
    first = np.ones(len(best), dtype=bool)
    first[1:] = run_key[best][1:] != run_key[best][:-1]
    k4 = np.zeros(co * ci * kh * kw, dtype=np.int64)
    k4[run_key[best][first]] = run_val[best][first]
    k4 = k4.reshape(co, ci, kh, kw)
    resid = (w.astype(np.int64) - _conv_matrix(k4, (ci, h, wd), (co, ho, wo), (sy, sx), (py, px))).tocsr()
    resid.eliminate_zeros()
    return Conv(k4.reshape(co, -1).astype(np.float64), kh, kw, (sy, sx), (py, px), (ci, h, wd),
                (co, ho, wo), resid.astype(np.float64) if resid.nnz else None)


def _structured_block(w: ConvMap, start: int) -> tuple[Block, np.ndarray]:
    """A block from the quantizer's structured map (``secinfer.ir.convmap``): the kernel is
    the source, W = conv(K) by construction (no read-back, no correction); a map whose
    dense work exceeds DENSE_FACTOR x its non-zeros (an identity shortcut, a batch norm on
    the identity) runs as a sparse product."""
    m, n = w.shape
    blk = Block(start, n)
    nnz = w.nnz
    if nnz == 0:
        blk.zero = True
    elif w.kernel.size * w.out_shape[1] * w.out_shape[2] <= DENSE_FACTOR * nnz:
        co = w.kernel.shape[0]
        blk.conv = Conv(w.kernel.reshape(co, -1).astype(np.float64), w.kh, w.kw, w.stride, w.pad,
                        w.conv_in, w.out_shape, None, w.pre)
    else:
        blk.sparse = w.tocsr().astype(np.float64)
    return blk, w.row_l1()


def plan(weights: list, in_shapes: list, out_shape) -> ProductPlan:
    """The product plan of a round: one block per source (weights: int64 sparse (m, n_s), or
    the quantizer's structured ``ConvMap``)."""
    m = int(weights[0].shape[0])
    blocks, start, l1 = [], 0, np.zeros(m, dtype=np.float64)
    for w, shp in zip(weights, in_shapes):
        if isinstance(w, ConvMap):
            blk, rl1 = _structured_block(w, start)
            l1 += rl1
            blocks.append(blk)
            start += blk.width
            continue
        w = sp.csr_matrix(w, dtype=np.int64)
        w.sum_duplicates()
        l1 += np.asarray(abs(w).sum(axis=1), dtype=np.float64).reshape(-1)
        n = int(w.shape[1])
        blk = Block(start, n, zero=w.nnz == 0)
        cv = find_conv(w, shp, out_shape) if w.nnz else None
        if cv is not None:
            dense_work = cv.kernel.size * cv.out_shape[1] * cv.out_shape[2]
            sparse_work = w.nnz - (0 if cv.resid is None else cv.resid.nnz)
            if dense_work <= DENSE_FACTOR * sparse_work:
                blk.conv = cv
        if blk.conv is None and not blk.zero:
            if w.nnz * DENSE_FACTOR >= m * n:
                blk.dense = w.toarray().astype(np.float64)
            else:
                blk.sparse = w.astype(np.float64)
        blocks.append(blk)
        start += n
    return ProductPlan(m, start, int(l1.max(initial=0)), blocks)


# ---------------------------------------------------------------- applying
def _buf(ws: dict | None, name: str, shape: tuple, dtype, zero: bool = False) -> np.ndarray:
    """A work buffer of this shape, kept in ``ws`` and reused by the next tile."""
    shape = tuple(int(a) for a in shape)
    b = None if ws is None else ws.get(name)
    if b is None or b.shape != shape or b.dtype != dtype:
        b = np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
        if ws is not None:
            ws[name] = b
    elif zero:
        b.fill(0)
    return b


def _load_limbs(dst, parts: list, c0: int, c1: int, nl: int, lb: int, shape=None) -> None:
    """dst[..., j cc:(j+1) cc] = limb j (lb bits) of the columns c0:c1 of the side-by-side
    uint64 parts, converted to float64 (``shape``: the rows' image shape for dst's view)."""
    mask = np.int64((1 << lb) - 1)
    cc = c1 - c0
    off = 0
    for a in parts:
        wd = int(a.shape[1])
        lo, hi = max(c0, off), min(c1, off + wd)
        if lo < hi:
            src = a[:, lo - off:hi - off].view(np.int64)
            for j in range(nl):
                v = (src >> np.int64(lb * j)) & mask if j else src & mask
                if shape is not None:
                    v = v.reshape(tuple(shape) + (hi - lo,))
                dst[..., j * cc + lo - c0:j * cc + hi - c0] = v
        off += wd


def _conv_tile(cv: Conv, parts: list, c0: int, c1: int, nl: int, lb: int, ws=None, tag=0) -> np.ndarray:
    """conv(X[:, c0:c1] limbs) as float64 (co*ho*wo, nl*cc): im2col by row bands whose
    patches stay near PATCH_BYTES, one GEMM per band."""
    ci, h, w = cv.in_shape
    co, ho, wo = cv.out_shape
    (sy, sx), (py, px), kh, kw = cv.stride, cv.pad, cv.kh, cv.kw
    cols = nl * (c1 - c0)
    hp = max(h + 2 * py, (ho - 1) * sy + kh)
    wp = max(w + 2 * px, (wo - 1) * sx + kw)
    xp = _buf(ws, f"xp{tag}", (ci, hp, wp, cols), np.float64, zero=True)
    if cv.pre is None:
        _load_limbs(xp[:, py:py + h, px:px + w], parts, c0, c1, nl, lb, (ci, h, w))
    else:
        _pool_limbs(cv.pre, xp[:, py:py + h, px:px + w], parts, c0, c1, nl, lb, ws, tag)
    kk = ci * kh * kw
    rows = max(1, min(ho, PATCH_BYTES // (8 * kk * cols * max(1, wo))))
    out = _buf(ws, f"o{tag}", (co, ho, wo, cols), np.float64)
    pt = _buf(ws, f"pt{tag}", (ci, kh, kw, rows, wo, cols), np.float64)
    for y0 in range(0, ho, rows):
        r = min(rows, ho - y0)
        pv = pt[:, :, :, :r]
        for dy in range(kh):
            ys = slice(y0 * sy + dy, (y0 + r - 1) * sy + dy + 1, sy)
            for dx in range(kw):
                pv[:, dy, dx] = xp[:, ys, dx:dx + sx * (wo - 1) + 1:sx]
        out[:, y0:y0 + r] = (cv.kernel @ pv.reshape(kk, -1)).reshape(co, r, wo, cols)
    out = out.reshape(co * ho * wo, cols)
    if cv.resid is not None:
        out += cv.resid @ xp[:, py:py + h, px:px + w].reshape(ci * h * w, cols)
    return out


def _pool_limbs(pr: Pool, dst: np.ndarray, parts: list, c0: int, c1: int, nl: int, lb: int, ws, tag) -> None:
    """dst (c, hz, wz, cols) = the sum pooling ``pr`` of the limbs of columns c0:c1: the first
    of two stages in one round (pooling, then the convolution on the pooled limbs; still
    exact: the plan's l1 bound is the convolution's times the pooling's)."""
    c, h, w = pr.in_shape
    _, hz, wz = pr.out_shape
    (sy, sx), (py, px) = pr.stride, pr.pad
    kh, kw = pr.weight.shape[1:]
    cols = dst.shape[-1]
    hp, wp = max(py + h, (hz - 1) * sy + kh), max(px + w, (wz - 1) * sx + kw)
    x0 = _buf(ws, f"x0{tag}", (c, hp, wp, cols), np.float64, zero=True)
    _load_limbs(x0[:, py:py + h, px:px + w], parts, c0, c1, nl, lb, (c, h, w))
    ones = bool(np.all(pr.weight == 1))
    dst[...] = 0.0
    for dy in range(kh):
        for dx in range(kw):
            tap = x0[:, dy:dy + sy * (hz - 1) + 1:sy, dx:dx + sx * (wz - 1) + 1:sx]
            if ones:
                dst += tap
            else:
                dst += pr.weight[:, dy, dx].astype(np.float64)[:, None, None, None] * tap


def _block_tile(blk: Block, parts: list, c0: int, c1: int, nl: int, lb: int, ws=None, tag=0) -> np.ndarray:
    if blk.conv is not None:
        return _conv_tile(blk.conv, parts, c0, c1, nl, lb, ws, tag)
    xt = _buf(ws, f"xt{tag}", (blk.width, nl * (c1 - c0)), np.float64)
    _load_limbs(xt, parts, c0, c1, nl, lb)
    return blk.dense @ xt if blk.dense is not None else np.asarray(blk.sparse @ xt)


def _near_pow2(q: int) -> tuple[int, int] | None:
    """(k, d) with q = 2^k + d and |d| < 2^20 (Lattigo's NTT primes are all of this form),
    or None."""
    for k in (int(q).bit_length() - 1, int(q).bit_length()):
        d = int(q) - (1 << k)
        if abs(d) < 1 << 20 and 20 <= k <= 60:
            return k, d
    return None


def _fix(t: np.ndarray, q: int, tmp: np.ndarray, above: int) -> None:
    """t (int64 in [-q, (above + 1) q)) into [0, q), in place, branch-free: add q where
    negative, then ``above`` times subtract q and add it back where that went negative."""
    qq = np.int64(q)
    for i in range(above + 1):
        if i:
            t -= qq
        np.right_shift(t, np.int64(63), out=tmp)          # -1 where negative, else 0
        tmp &= qq
        t += tmp


def _reduce(v: np.ndarray, q: int, kd: tuple[int, int], tmp: np.ndarray) -> np.ndarray:
    """v mod q in place for int64 |v| < 2^62 and q = 2^k + d, |d| < 2^20:
    v = h 2^k + l = l - h d (mod q), |h d| < 2^(82 - k) <= q, so l - h d lies in [-q, 2q)."""
    k, d = kd
    np.right_shift(v, np.int64(k), out=tmp)
    tmp *= np.int64(d)
    v &= np.int64((1 << k) - 1)
    v -= tmp
    _fix(v, q, tmp, 1)
    return v


def _shift_add(acc: np.ndarray, lb: int, r: np.ndarray, q: int, kd: tuple[int, int],
               tmp: np.ndarray) -> np.ndarray:
    """(acc 2^lb + r) mod q in place (acc), for acc, r in [0, q) and lb < k: acc = h 2^(k-lb)
    + l gives acc 2^lb = h 2^k + l 2^lb = l 2^lb - h d (mod q); |h d| < 2^(lb + 21) <= q,
    so the sum lies in [-q, 3q)."""
    k, d = kd
    np.right_shift(acc, np.int64(k - lb), out=tmp)
    tmp *= np.int64(d)
    acc &= np.int64((1 << (k - lb)) - 1)
    acc <<= np.int64(lb)
    acc -= tmp
    acc += r
    _fix(acc, q, tmp, 2)
    return acc


def _mul_pow2(r: np.ndarray, k: int, q: int) -> np.ndarray:
    """r * 2^k mod q for int64 0 <= r < q < 2^62, by shifts that stay below 2^63 (any q)."""
    step = 63 - int(q).bit_length()
    if step < 1:
        raise ConfigError("prime too wide for the limb recombination")
    qq = np.int64(q)
    while k > 0:
        s = min(step, k)
        r = np.mod(r << np.int64(s), qq)
        k -= s
    return r


def recombine(y: np.ndarray, nl: int, lb: int, q: int, ws: dict | None = None) -> np.ndarray:
    """sum_j 2^(lb j) y[:, j C:(j+1) C] mod q as int64 in [0, q), for float64 y holding
    integers of magnitude below 2^53; row blocks of ~ROW_ELEMS values stay in cache."""
    m, C = y.shape[0], y.shape[1] // nl
    out = _buf(ws, "rec", (m, C), np.int64)
    kd = _near_pow2(q)
    # the fast reductions' bounds: |h d| below q in _reduce (|y| < 2^53) and _shift_add
    fast = kd is not None and kd[0] >= 37 and lb + 22 <= kd[0]
    qq = np.int64(q)
    step = max(1, ROW_ELEMS // max(1, C))
    for r0 in range(0, m, step):
        rows = slice(r0, min(m, r0 + step))
        acc = out[rows]
        tmp = _buf(ws, "rec_t", acc.shape, np.int64)
        r = _buf(ws, "rec_r", acc.shape, np.int64)
        for j in range(nl - 1, -1, -1):
            dst = acc if j == nl - 1 else r
            dst[...] = y[rows, j * C:(j + 1) * C]                  # exact: |y| < 2^53
            if fast:
                _reduce(dst, q, kd, tmp)
                if j < nl - 1:
                    _shift_add(acc, lb, r, q, kd, tmp)
            else:
                np.mod(dst, qq, out=dst)
                if j < nl - 1:
                    acc[...] = np.mod(_mul_pow2(acc, lb, q) + r, qq)
    return out


def _pool_map(threads: int, fn, items) -> list:
    if threads <= 1 or len(items) <= 1:
        return [fn(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:      # numpy and BLAS release the GIL
        return list(pool.map(fn, items))


def product_mod(p: ProductPlan, sources: list, q: int, threads: int = 1, out: np.ndarray | None = None,
                work: dict | None = None) -> np.ndarray:
    """(W X) mod q as int64 (m, C) in [0, q). X is given per block of the plan (per source)
    as column parts: ``sources[i]`` a list of uint64 arrays (n_i, c) of residues < q, side by
    side (e.g. an LWE batch's b and a residues). The columns are cut into tiles of COL_TILE;
    each tile runs from limbs to recombined residues on its own, in buffers reused from
    tile to tile (fresh large buffers cost a page fault per 4 KiB); ``threads`` workers
    take tiles, BLAS itself runs on one thread each. ``work``: a dict the caller keeps to
    reuse the work buffers from call to call (the server's round tiles)."""
    import threading

    from threadpoolctl import threadpool_limits

    nl, lb = p.limbs(q)
    if len(sources) != len(p.blocks):
        raise ConfigError(f"product plan has {len(p.blocks)} sources, got {len(sources)}")
    widths = [int(a.shape[1]) for a in sources[0]]
    for blk, parts in zip(p.blocks, sources):
        # a zero block's source is not read: the caller may pass it empty (a tile that needs none of it)
        rows_ok = blk.zero or all(int(a.shape[0]) == blk.width for a in parts)
        if not rows_ok or [int(a.shape[1]) for a in parts] != widths:
            raise ConfigError("product input does not match the plan's shapes")
    C = sum(widths)
    if out is None or out.shape != (p.m, C) or out.dtype != np.int64 or not out.flags.c_contiguous:
        out = np.empty((p.m, C), dtype=np.int64)       # ``out``: a caller's buffer to reuse
    local = threading.local()

    def tile(c0: int) -> None:
        ws = getattr(local, "ws", None)
        if ws is None:
            ws = local.ws = {} if work is None else work.setdefault(threading.get_ident(), {})
        c1 = min(C, c0 + COL_TILE)
        y = None
        for i, (blk, parts) in enumerate(zip(p.blocks, sources)):
            if blk.zero:
                continue
            part = _block_tile(blk, parts, c0, c1, nl, lb, ws, i)
            if y is None:
                y = part                     # a buffer of block i's own: safe to add into
            else:
                y += part                    # still exact: l1 bounds the sum over all blocks
        if y is None:                        # every block is zero
            out[:, c0:c1] = 0
        else:
            out[:, c0:c1] = recombine(y, nl, lb, q, ws)

    with threadpool_limits(limits=1, user_api="blas"):
        _pool_map(threads, tile, list(range(0, C, COL_TILE)))
    return out


# ---------------------------------------------------------------- tiles (bounded memory)
@dataclass
class Tile:
    """A part of a round's outputs with exactly the inputs it reads: ``rows`` (true-order
    output rows, in the order ``plan``'s product yields them), ``needs[i]`` (true-order
    input indices of source i, in the order ``plan``'s block i reads them; empty: not read)."""

    rows: np.ndarray
    needs: list
    plan: ProductPlan


def _whole(p: ProductPlan) -> Tile:
    return Tile(np.arange(p.m, dtype=np.int64),
                [np.zeros(0, np.int64) if b.zero else np.arange(b.width, dtype=np.int64) for b in p.blocks], p)


def _band(p: ProductPlan, shape: tuple, y0: int, y1: int) -> Tile:
    """Output rows y0..y1-1 (every channel) of a round whose output is the image ``shape``."""
    co, ho, wo = shape
    rows = (np.arange(co)[:, None, None] * (ho * wo) + np.arange(y0, y1)[None, :, None] * wo
            + np.arange(wo)[None, None, :]).reshape(-1).astype(np.int64)
    blocks, needs, start = [], [], 0
    for blk in p.blocks:
        sub = Block(start, 0, zero=True)
        need = np.zeros(0, np.int64)
        if blk.conv is not None:
            cv = blk.conv
            ci, h, w = cv.in_shape
            top = y0 * cv.stride[0] - cv.pad[0]                    # input row of the band's first tap
            lo, hi = max(0, top), min(h, (y1 - 1) * cv.stride[0] - cv.pad[0] + cv.kh)
            pre = None
            if hi > lo and cv.pre is not None:
                # the pooling's output rows lo..hi-1 from its own input rows (two stages)
                pr = cv.pre
                c0_, h0, w0 = pr.in_shape
                kh0 = pr.weight.shape[1]
                top0 = lo * pr.stride[0] - pr.pad[0]
                lo0, hi0 = max(0, top0), min(h0, (hi - 1) * pr.stride[0] - pr.pad[0] + kh0)
                pre = Pool(pr.weight, pr.stride, (lo0 - top0, pr.pad[1]), (c0_, hi0 - lo0, w0),
                           (c0_, hi - lo, w))
                need = (np.arange(c0_)[:, None, None] * (h0 * w0) + np.arange(lo0, hi0)[None, :, None] * w0
                        + np.arange(w0)[None, None, :]).reshape(-1).astype(np.int64)
            elif hi > lo:
                need = (np.arange(ci)[:, None, None] * (h * w) + np.arange(lo, hi)[None, :, None] * w
                        + np.arange(w)[None, None, :]).reshape(-1).astype(np.int64)
            if hi > lo:
                sub = Block(start, len(need), conv=Conv(cv.kernel, cv.kh, cv.kw, cv.stride, (lo - top, cv.pad[1]),
                                                        (ci, hi - lo, w), (co, y1 - y0, wo), None, pre))
        elif blk.sparse is not None:
            wr = blk.sparse[rows]
            need = np.unique(wr.indices).astype(np.int64)
            if len(need):
                sub = Block(start, len(need), sparse=sp.csr_matrix(wr[:, need]))
        elif blk.dense is not None:
            need = np.arange(blk.width, dtype=np.int64)
            sub = Block(start, blk.width, dense=np.ascontiguousarray(blk.dense[rows]))
        blocks.append(sub)
        needs.append(need)
        start += len(need)
    return Tile(rows, needs, ProductPlan(len(rows), start, p.l1, blocks))


def tiles(p: ProductPlan, out_shape, cols: int, budget_bytes: int | None) -> list[Tile]:
    """The round's outputs cut into bands of output rows (all channels) so that one band's
    inputs and outputs (``cols`` residues of 8 bytes per LWE ciphertext) stay within
    ``budget_bytes``; one tile when the whole round fits, without a budget, or when the round
    is not an image-to-image map of convolutions (a head, a probed map with a correction)."""
    shape = tuple(int(a) for a in out_shape) if out_shape is not None else ()
    if budget_bytes is None or len(shape) != 3 or shape[0] * shape[1] * shape[2] != p.m or \
            any(b.conv is not None and (b.conv.resid is not None or b.conv.out_shape != shape)
                for b in p.blocks):
        return [_whole(p)]
    ho = shape[1]

    def cost(t: Tile) -> int:
        return (len(t.rows) + sum(len(n) for n in t.needs)) * cols * 8

    band = ho
    while band > 1:
        if cost(_band(p, shape, 0, band)) <= budget_bytes and \
                cost(_band(p, shape, (ho - band) // 2, (ho - band) // 2 + band)) <= budget_bytes:
            break
        band = max(1, band // 2)
    if band >= ho:
        return [_whole(p)]
    return [_band(p, shape, y0, min(ho, y0 + band)) for y0 in range(0, ho, band)]
