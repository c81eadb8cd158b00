"""The row layout of the HE linear layer: a layer as grouped row-matrix products
(``rows_and_mats``), chunks of c inputs per polynomial and blocks of n_o outputs per
answer at stride S (``budget.LayerBudget``; the encoding is explained in ``ckks_engine``).
Convolutions that fit the channel-packed layout use ``he_conv`` instead."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from secinfer.arith.linalg import conv_columns
from secinfer.errors import ConfigError
from secinfer.ir.graph import lift_2d
from secinfer.net.channel import ArraySpec
from secinfer.protocols.crisp import he_native, lifted
from secinfer.protocols.crisp.budget import LayerBudget
from secinfer.protocols.crisp.he_core import CLIENT, SERVER, _as_limbs, digit_limbs


def rows_and_mats(step, w: np.ndarray | None, a: np.ndarray | None, batch_in_shape) -> tuple:
    """The layer as grouped row-matrix products: rows (R, K) per group and W (K, N_out).

    Returns (groups, finish) where groups = [(rows or None, W or None, K, N_out)] and
    ``finish(list of (R, N_out, L))`` rearranges the products into out_shape + (L,).
    Weights may be None (client side: only shapes needed; K, N_out come from the plan).
    """
    op = step.node_op
    out_shape = tuple(step.out_shape)
    if op in ("Gemm", "MatMul"):
        k, n_out = step.in_shape[-1], out_shape[-1]
        rows = None if a is None else a.reshape(-1, k, a.shape[-1])

        def finish(ys):
            return ys[0].reshape(out_shape + (ys[0].shape[-1],))
        return [(rows, w, k, n_out)], finish
    if op == "Mul":
        feat = int(np.prod(step.in_shape[1:]))
        blk = 32
        groups = []
        wf = None if w is None else np.broadcast_to(w, step.in_shape[1:]).reshape(-1)
        for s in range(0, feat, blk):
            e = min(feat, s + blk)
            rows = None if a is None else a.reshape(a.shape[0], feat, a.shape[-1])[:, s:e]
            mat = None if wf is None else np.diag(wf[s:e]).astype(np.int64)
            groups.append((rows, mat, e - s, e - s))

        def finish(ys):
            return np.concatenate(ys, axis=1).reshape(out_shape + (ys[0].shape[-1],))
        return groups, finish
    if op == "Conv":
        p = lift_2d(step.node())
        g_ = int(step.attrs.get("group", 1))
        m = out_shape[1]
        kc = step.in_shape[1] // g_ * int(np.prod(step.attrs["kernel_shape"]))
        n_, oh, ow = out_shape[0], out_shape[2], out_shape[3]
        cols = None
        if a is not None:
            wshape = (m, step.in_shape[1] // g_) + tuple(step.attrs["kernel_shape"])
            cols = lifted.apply_limbwise(a, lambda x: conv_columns(x, wshape, p["strides"], p["pads"],
                                                                  p["dilations"], g_)[0])
        wg = None if w is None else w.reshape(g_, m // g_, -1)
        groups = []
        for gi in range(g_):
            rows = None if cols is None else cols[:, gi].transpose(0, 2, 1, 3).reshape(-1, kc, cols.shape[-1])
            mat = None if wg is None else np.ascontiguousarray(wg[gi].T)
            groups.append((rows, mat, kc, m // g_))

        def finish(ys):
            lim = ys[0].shape[-1]
            parts = [y.reshape(n_, oh * ow, m // g_, lim).transpose(0, 2, 1, 3) for y in ys]
            return np.concatenate(parts, axis=1).reshape(n_, m, oh, ow, lim)
        return groups, finish
    raise ConfigError(f"crisp/ckks: no HE layout for {op}")


def rows_of(step, k_in: int, n_groups: int) -> int:
    """Rows of a layer group (every group of a layer has the same number)."""
    if step.node_op in ("Gemm", "MatMul"):
        return int(np.prod(step.in_shape[:-1]))
    if step.node_op == "Mul":
        return int(step.in_shape[0])
    out = step.out_shape
    return int(out[0] * out[2] * out[3])


def plans(eng, step, w=None) -> list:
    """(group, budget, rows, row groups, outputs, weight matrix or None) of every group of
    a layer."""
    groups, _ = rows_and_mats(step, w, None, None)
    out = []
    for gi, (_, mat, k_in, n_out) in enumerate(groups):
        n_rows = rows_of(step, k_in, len(groups))
        bud = eng.budget(k_in, n_out, step.wbits, n_rows)
        out.append((gi, bud, n_rows, -(-n_rows // bud.rows_per), n_out, mat))
    return out


def _digits(rows: np.ndarray, bud: LayerBudget) -> list:
    """T digits of D bits of each element, each as 40-bit limbs (``digit_limbs``)."""
    return [digit_limbs(rows, bud.D * t, bud.D) for t in range(bud.T)]


def client_poly(n_ring: int, re_d, im_d, bud: LayerBudget, chunk: int, rg: int) -> np.ndarray:
    """The client polynomial of one row group and input chunk as (L, N) int64 limbs;
    digits as limb arrays (L, rows, k) or one integer array (rows, k)."""
    re_d = _as_limbs(re_d)
    im_d = None if im_d is None else _as_limbs(im_d)
    poly = np.zeros((re_d.shape[0], n_ring), np.int64)
    r0 = rg * bud.rows_per
    cs = slice(chunk * bud.c, (chunk + 1) * bud.c)
    for r in range(r0, min(r0 + bud.rows_per, re_d.shape[1])):
        seg = re_d[:, r, cs]
        base = (r - r0) * bud.S
        poly[:, base:base + seg.shape[1]] = seg
        if im_d is not None:
            poly[:, bud.half + base:bud.half + base + seg.shape[1]] = im_d[:, r, cs]
    return poly


def targets(bud: LayerBudget, n_rows: int, rg: int, block: int, n_out: int):
    """(rows, outputs, coefficient positions) an answer of (row group, block) carries."""
    r0 = rg * bud.rows_per
    rows = np.arange(r0, min(r0 + bud.rows_per, n_rows))
    js = np.arange(block * bud.n_o, min((block + 1) * bud.n_o, n_out))
    pos = ((rows - r0)[:, None] * bud.S + (js - block * bud.n_o)[None, :] * bud.c + bud.c - 1)
    return rows, js, pos


def client_rows(eng, ep, idx: int, step, v1: np.ndarray, w1) -> tuple:
    """Client: encrypt the layer's rows (value and MAC halves), read the masked answers."""
    g = eng.g
    groups, finish = rows_and_mats(step, None, v1, None)
    groups_im = rows_and_mats(step, None, w1, None)[0] if eng.malicious else None
    outs_re, outs_im = [], []
    for gi, (rows, _, k_in, n_out) in enumerate(groups):
        bud = eng.budget(k_in, n_out, step.wbits, rows.shape[0])
        d_re = _digits(rows, bud)
        d_im = _digits(groups_im[gi][0], bud) if eng.malicious else None
        n_rows = rows.shape[0]
        n_rg = -(-n_rows // bud.rows_per)
        eng.zk_begin(CLIENT, idx, gi, bud, bud.T * n_rg * bud.n_chunks)
        eng.encrypt_send_all(ep, idx, (client_poly(eng.params.n, d_re[t], d_im[t] if d_im else None, bud, ch, rg)
                                       for t in range(bud.T) for rg in range(n_rg)
                                       for ch in range(bud.n_chunks)), bud)
        acc_re = g.zeros((n_rows, n_out))
        acc_im = g.zeros((n_rows, n_out)) if eng.malicious else None
        for t in range(bud.T):
            for rg in range(n_rg):
                for blk in range(bud.n_blocks):
                    (raw,) = ep.recv(SERVER, f"crisp/lin/{idx}/res", ArraySpec(np.uint8, (None,), max_elems=1 << 28))
                    rws, js, pos = targets(bud, n_rows, rg, blk, n_out)
                    vals = eng.decrypt_positions(raw, bud, pos)
                    sel = (slice(rws[0], rws[-1] + 1), slice(js[0], js[-1] + 1))
                    acc_re[sel] = g.add(acc_re[sel], g.shl(vals[0], bud.D * t))
                    if eng.malicious:
                        acc_im[sel] = g.add(acc_im[sel], g.shl(vals[1], bud.D * t))
        outs_re.append(acc_re)
        outs_im.append(acc_im)
    return finish(outs_re), (finish(outs_im) if eng.malicious else None)


def weight_polys(eng, mat, bud) -> dict:
    """The weight plaintexts of a group: one per (input chunk, output block)."""
    out = {}
    for ch in range(bud.n_chunks):
        for blk in range(bud.n_blocks):
            wp = np.zeros(eng.params.n, np.float64)
            sub = mat[ch * bud.c:(ch + 1) * bud.c, blk * bud.n_o:(blk + 1) * bud.n_o]
            jj, ii = np.meshgrid(np.arange(sub.shape[1]), np.arange(sub.shape[0]), indexing="ij")
            wp[jj * bud.c + bud.c - 1 - ii] = sub.T
            out[ch, blk] = eng.weight_plaintext(wp, bud.level)
    return out


def server_rows(eng, ep, idx, step, w, prg):
    """Server: W times the client's ciphertexts, masked answers; returns its mask shares."""
    g = eng.g
    _, finish = rows_and_mats(step, w, None, None)
    masks_re, masks_im = [], []
    for gi, bud, n_rows, n_rg, n_out, mat in plans(eng, step, w):
        wpolys = eng._wcache.pop((idx, gi), None) or weight_polys(eng, mat, bud)
        eng.zk_begin(SERVER, idx, gi, bud, bud.T * n_rg * bud.n_chunks, prg)
        m_re = g.zeros((n_rows, n_out))
        m_im = g.zeros((n_rows, n_out))
        # Streamed: each client ciphertext is multiplied into every block's accumulator as
        # it arrives (while the client encrypts the next); a row group's answers are
        # computed once its last chunk is in and sent at once (semi-honest). Malicious:
        # sent only after the proof of plaintext knowledge is checked, which runs in a
        # worker while the last row group's answers are computed.
        raws, held = [], []     # held: ciphertexts the pending proof still reads
        verifying = None
        pool = ThreadPoolExecutor(1) if eng.malicious else None
        try:
            for t in range(bud.T):
                for rg in range(n_rg):
                    accs = None
                    for ch in range(bud.n_chunks):
                        ct = eng.recv_client_ct(ep, idx, bud)
                        accs = he_native.mul_blocks(eng.params, ct, [wpolys[ch, b] for b in range(bud.n_blocks)],
                                                    accs)
                        if eng.malicious:
                            held.append(ct)
                        else:
                            ct.close()
                    if eng.malicious and t == bud.T - 1 and rg == n_rg - 1 and verifying is None:
                        # the group's last proof is open: read and check the client's response
                        # in a worker (Go, off the GIL) while the last answers are computed here
                        # (nothing is sent before both are done; ep is not used meanwhile)
                        verifying = pool.submit(eng.settle_proof, ep)
                    for blk in range(bud.n_blocks):
                        rws, js, pos = targets(bud, n_rows, rg, blk, n_out)
                        raw, rmask = eng.masked_answer(idx, accs[blk], bud, prg, pos)
                        accs[blk] = None
                        if eng.malicious:
                            raws.append(raw)
                        else:
                            eng.send_answers(ep, idx, [raw])
                        sel = (slice(rws[0], rws[-1] + 1), slice(js[0], js[-1] + 1))
                        m_re[sel] = g.add(m_re[sel], g.shl(rmask[pos], bud.D * t))
                        if eng.malicious:
                            m_im[sel] = g.add(m_im[sel], g.shl(rmask[pos + bud.half], bud.D * t))
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
        if verifying is not None:
            verifying.result()          # re-raises the proof's abort
        eng.send_answers(ep, idx, raws)
        for c in held:
            c.close()
        for p in wpolys.values():
            p.close()
        masks_re.append(m_re)
        masks_im.append(m_im)
    return finish(masks_re), finish(masks_im)
