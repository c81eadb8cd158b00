"""The semi-honest ``reveal="direct"`` online phase of ``astra`` prediction, precomputed.

Everything of a server's online step that does not depend on the query is folded into
constants in the offline phase, so that after the query arrives an evaluator runs one dot
product, one addition and a send (issue #23: on these 2-core machines every numpy call
made right after a wake-up costs tens of microseconds, so the count of calls on the
critical path is the latency). Against [ASTRA Fig. 3, 4, 11]'s steps the output is the
same bit for bit (tests/astra/test_direct.py: the oracle and ``reveal="paper"``) and
nobody learns more:

* regression: the same messages; P0's only one, lambda_y, depends on no query, so it rides
  on P0's "ready" acknowledgement at the end of the offline phase (prepared sessions: on
  its lambda_x message) and P0 has no online phase at all;
* classification: the comparison is garbled by P1 and P2 and evaluated by P0 on the
  evaluators' own additive terms (``bitext_offline_direct``), so the evaluators' exchange
  of m_u is gone: three online rounds (query, labels, y) instead of four. The client gets
  y from P0 and the mask r from P1 (offline, with P1's "ready").

The client checks its query in the offline phase (``mdl.encode_input``'s typed errors,
before any message of it) and encodes and masks it online in cache-sized passes into
buffers allocated offline (``encode_masked``).
"""

from __future__ import annotations

import sys

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.crypto.gc import garble as gcm
from secinfer.crypto.gc.circuit import msb_sub_ripple
from secinfer.net.channel import Endpoint
from secinfer.protocols.astra.bitext import BitExtPrep
from secinfer.protocols.astra.engine import ring_dot
from secinfer.protocols.rep3 import linear as mdl
from secinfer.protocols.rep3.wire import pack, packed_spec, unpack
from secinfer.spec import ArraySpec

_ONE = np.uint64(1)
_R64 = Ring(64)


def applies(security: str, direct: bool) -> bool:
    """This path serves the semi-honest direct reveal of a regression or a classifier (the
    same answer at every party: the job's security and reveal option)."""
    return direct and security == "semi-honest"


def server_prep(eng, X, U, B, prep, bx, cls: bool, shift: int, rho, C: str) -> dict:
    """Offline: the constants of one server's online step (see the module docstring).

    Regression: Y = U + B, evaluator i sends [m_y]_i -/+ rho, P0 lambda_y.
    Classification (``bx`` from ``bitext_offline_direct``): A = 2^shift - 1 - Y = u_1 - u_2 with
    u_1 = c - [m_u]_1 - m_b + lambda_{y,1} (P1) and u_2 = [m_u]_2 - lambda_{y,2} (P2), where
    [m_u]_i = base_i + m_x coef_i."""
    role, R = eng.role, eng.R
    batch, n = U.shape
    fast = {"cls": cls, "lab": prep.lab, "bx_lab": bx.lab if cls else None}
    if role == "p0":
        if cls:
            fast.update(bx=bx, k_spec=ArraySpec(np.uint64, (batch * n, 64, 2)), circ=msb_sub_ripple(64),
                        dec=np.ascontiguousarray(bx.dec[:, 0], np.uint8), t_p0=f"astra/bx/{bx.lab}")
            _p0_small_prep(fast, batch * n)
        else:
            lam = R.add(R.add(U.l1, B.l1[None, :]), R.add(U.l2, B.l2[None, :]))
            fast["to_client"] = (pack(np.ascontiguousarray(lam).reshape(-1), 64),)
        return fast
    fast["x_spec"] = packed_spec(64, X.shape)
    fast["coef"] = np.ascontiguousarray(prep.coef)
    # the online step's buffer (its pages written now) and its flat view; the tag
    fast["u"] = np.full((batch, n), 0, np.uint64)
    fast["u_flat"] = fast["u"].reshape(-1)
    fast["thin"] = fast["coef"].shape[1] <= 4
    fast["send_to"] = "p0" if cls else C
    fast["k_neg"] = role == "p1"                  # P1's u_1 = k - m_x coef_1, P2's u_2 = m_x coef_2 + k
    if not cls:
        off = R.add(prep.base, B.m[None, :]) if role == "p1" else prep.base
        r = rho.reshape(batch, n)
        fast["off"] = R.add(off, r) if role == "p1" else R.sub(off, r)
        fast["tag"] = "astra/out/y/" + ("m1" if role == "p1" else "m2")
        _scalar_prep(fast)
        return fast
    _scalar_prep(fast)
    fast["tag"] = f"astra/bx/{bx.lab}/" + ("k1" if role == "p1" else "k2")
    fast["u_bytes"] = fast["u_flat"].view(np.uint8).reshape(-1, 8)   # _bits64's view, made now
    fast["r_gc"] = bx.r_gc
    fast["labels"] = np.full((batch * n, 64, 2), 0, np.uint64)   # the labels sent online (pages touched now)
    if role == "p1":
        c = np.full((batch, n), np.uint64((1 << shift) - 1), np.uint64)
        # u_1 = k - m_x coef_1 with k = c - base_1 - m_b + lambda_{y,1}
        fast["k"] = R.add(R.sub(R.sub(c, prep.base), B.m[None, :]), R.add(U.l1, B.l1[None, :]))
        fast["zeros"] = bx.zeros["u1"]
        fast["to_client"] = (pack(bx.rbit, 1),)
    else:
        # u_2 = m_x coef_2 + k with k = base_2 - lambda_{y,2}
        fast["k"] = R.sub(prep.base, R.add(U.l2, B.l2[None, :]))
        fast["zeros"] = bx.zeros["u2"]
    _scalar_prep(fast)
    return fast


def _p0_small_prep(fast: dict, size: int) -> None:
    """Offline, P0 with at most 8 outputs (one packed byte): packbits(lsb xor dec) =
    packbits(lsb) xor packbits(dec), so the decoding bits' byte is made now and y's byte on
    Python integers online (``_p0_step``; "Sixth pass"); ``fast["ybuf"]``: (the 1-byte
    buffer sent, the count of outputs), None otherwise."""
    fast["ybuf"] = None
    if size <= 8:
        fast["dec_byte"] = int(np.packbits(fast["dec"] & 1)[0])
        fast["ybuf"] = (np.full(1, 0, np.uint8), size)


def _scalar_prep(fast: dict) -> None:
    """Offline, for a query of one output value (batch 1, one output: W1 and W2 of issue #23)
    with a thin product: the constants of ``_scalar_step``, the evaluator's online step on
    Python integers (one numpy call, the dot product, instead of three to five: after a
    wake-up each numpy call costs tens of microseconds, "Sixth pass"). ``fast["scalar"]`` is
    None otherwise. Called once the step's constants are all made (classification: ``k``,
    ``zeros`` and ``r_gc``; regression: ``off``)."""
    fast["scalar"] = None
    if fast["u"].size != 1 or not fast["thin"] or "k" not in fast and "off" not in fast:
        return
    sc = {"coef": np.ascontiguousarray(fast["coef"][:, 0])}
    if not fast["cls"]:
        sc["add"] = int(fast["off"].reshape(-1)[0])
    else:
        if sys.byteorder != "little":   # (the table holds the labels' wire bytes)
            return
        sc["add"] = int(fast["k"].reshape(-1)[0])
        # the 64 input labels of u, byte by byte: for byte p of u and its value v, the 8
        # labels of bits 8p .. 8p+7 (bit * R xor the zero label, ``_bits_into_labels``) as
        # the 128 bytes they are on the wire; both labels of every input wire are the
        # garbler's anyway
        bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
        z = fast["zeros"].reshape(8, 1, 8, 2)
        r = fast["r_gc"].reshape(1, 1, 1, 2)
        tab = z ^ (bits[None, :, :, None].astype(np.uint64) * r)          # (8, 256, 8, 2)
        sc["lab"] = [[tab[p, v].tobytes() for v in range(256)] for p in range(8)]
        # the frame's buffer (``fast["labels"]``) as bytes: the 8 slices are written into it
        # online ("Seventh pass": no join, no new array)
        sc["mv"] = memoryview(fast["labels"]).cast("B")
    fast["scalar"] = sc


_M64 = (1 << 64) - 1


def _scalar_step(fast: dict, sc: dict, m_x: np.ndarray) -> np.ndarray:
    """``_evaluator_step`` for one output value (``_scalar_prep``): the same array, from the
    dot product of Z_2^64 (numpy's uint64 dot wraps mod 2^64, as ``_dot_into``'s) and
    Python integers mod 2^64."""
    d = int(m_x[0].dot(sc["coef"]))          # (m_x: one row)
    uf = fast["u_flat"]
    if not fast["cls"]:
        uf[0] = (d + sc["add"]) & _M64
        return uf
    u = (sc["add"] - d) & _M64 if fast["k_neg"] else (d + sc["add"]) & _M64
    uf[0] = u
    lab, mv = sc["lab"], sc["mv"]
    # byte p of u selects the 128 bytes of its 8 labels; straight-line ("Seventh pass")
    mv[0:128] = lab[0][u & 255]
    mv[128:256] = lab[1][(u >> 8) & 255]
    mv[256:384] = lab[2][(u >> 16) & 255]
    mv[384:512] = lab[3][(u >> 24) & 255]
    mv[512:640] = lab[4][(u >> 32) & 255]
    mv[640:768] = lab[5][(u >> 40) & 255]
    mv[768:896] = lab[6][(u >> 48) & 255]
    mv[896:1024] = lab[7][u >> 56]
    return fast["labels"]


def bitext_offline_direct(eng, n: int) -> BitExtPrep:
    """Offline half of the comparison msb(u_1 - u_2) xor r on this path: P1 and P2 garble
    ``msb_sub_ripple`` from k_12 (identical circuits, the free-XOR + half-gates garbling of
    ``secinfer.crypto.gc``), P1 sends P0 the tables, the decoding bits and the labels of r;
    P0 evaluates online.

    [ASTRA 5.4] has P0 and P1 garble and P2 evaluate on (m_a, lambda_a), which needs m_a at
    P1 (the evaluators' exchange of m_u, one round). Here the two inputs are the evaluators'
    own additive terms u_1, u_2 (A = u_1 - u_2), so each sends its labels as soon as its dot
    product is done and the comparison costs one round less. Semi-honest only. Views: P0
    gets a garbled circuit with one label per input wire (it knows neither the free-XOR
    offset nor any zero label: both come from k_12), so it learns only the output
    y = msb(A) xor r with r from k_12 unknown to it; P1 and P2 receive nothing online; the
    client gets y from P0 and r from P1, as it got y from P2 and r from P0 before."""
    circ = msb_sub_ripple(64)
    lab = eng._label("bitext")          # every server: labels stay in step
    gcm.prepare(circ)                   # the native library and gate program: now, not online
    ep, role = eng.ep, eng.role
    t = f"astra/bx/{lab}"
    prep = BitExtPrep(lab, n)
    if role in ("p1", "p2"):
        s = eng.keys.stream("12", lab + "/gc")
        prep.r_gc, prep.zeros = gcm.input_labels(circ, n, lambda shape: s.ring(tuple(shape), 64))
        prep.rbit = eng.keys.stream("12", lab + "/r").ring((n,), 1).astype(np.uint8)
        if role == "p1":
            g = gcm.garble(circ, prep.r_gc, prep.zeros)
            ep.send("p0", t + "/gc", g.tables, g.decode, gcm.select(prep.zeros["u3"], prep.rbit[:, None], prep.r_gc))
    else:
        tables, dec, k3 = ep.recv("p1", t + "/gc", ArraySpec(np.uint64, (n, circ.and_count, 2, 2)),
                                  ArraySpec(np.uint8, (n, 1)), ArraySpec(np.uint64, (n, 1, 2)))
        prep.tables, prep.dec = tables, dec
        # the evaluation with its arguments bound now: the kernel of this one circuit
        # (``gcm.RippleEvaluator``, "Seventh pass"); the evaluators' labels are copied into
        # its two input buffers online
        prep.evaluator = gcm.RippleEvaluator(64, tables, k3)
        # one throwaway evaluation (as ``bitext._warm_evaluator``) on a copy of one instance:
        # the native call's first-use costs are paid offline
        gcm.RippleEvaluator(64, tables[:1], k3[:1])()
    return prep


def _bits64(u: np.ndarray) -> np.ndarray:
    """(m, 64) uint8: bit j of each uint64 of ``u`` (m,) at column j (``bits_of(u, 64)``):
    one ``unpackbits`` of the little-endian bytes."""
    if sys.byteorder == "little":
        return np.unpackbits(u.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    return ((u[:, None] >> np.arange(64, dtype=np.uint64)[None, :]) & _ONE).astype(np.uint8)


def _dot_into(out: np.ndarray, fast: dict, m_x: np.ndarray) -> np.ndarray:
    """m_x @ coef over Z_2^64 into ``out``: one ``np.dot`` for a thin right-hand side (uint64
    wraps mod 2^64: exact; numpy's integer product is slow only for wide ones), else the
    limb-split ring product (``engine.ring_dot``)."""
    if fast["thin"]:
        return np.dot(m_x, fast["coef"], out=out)
    out[...] = ring_dot(_R64, m_x, fast["coef"])
    return out


def _bits_into_labels(fast: dict) -> np.ndarray:
    """The evaluator's 64 input labels of ``fast["u"]`` (``gcm.select``: bit * R xor the zero
    label) into ``fast["labels"]``: one ``unpackbits`` of the buffer's byte view (``_bits64``)
    and two in-place ufuncs."""
    labels = fast["labels"]
    if sys.byteorder == "little":
        bits = np.unpackbits(fast["u_bytes"], axis=1, bitorder="little")
    else:
        bits = _bits64(fast["u_flat"])
    np.multiply(bits[:, :, None], fast["r_gc"], out=labels)
    labels ^= fast["zeros"]
    return labels


def _evaluator_step(fast: dict, m_x: np.ndarray) -> np.ndarray:
    """An evaluator's computation on the masked query: the array it sends (a buffer of
    ``fast``, overwritten by the next call)."""
    sc = fast.get("scalar")
    if sc is not None:
        return _scalar_step(fast, sc, m_x)
    u = _dot_into(fast["u"], fast, m_x)
    if not fast["cls"]:
        np.add(u, fast["off"], out=u)
        return fast["u_flat"]
    if fast["k_neg"]:
        np.subtract(fast["k"], u, out=u)
    else:
        np.add(u, fast["k"], out=u)
    return _bits_into_labels(fast)


def _p0_step(fast: dict, k1: np.ndarray, k2: np.ndarray) -> np.ndarray:
    """P0's evaluation of the comparison on both evaluators' labels and its decoding: the
    packed y it sends. ``k1`` None: P1's labels are in the evaluator's buffer already
    (``server_online`` puts them there before it waits for P2's)."""
    ev = fast["bx"].evaluator
    if k1 is not None:
        np.copyto(ev.u1, k1)
    np.copyto(ev.u2, k2)
    out = ev()
    yb = fast.get("ybuf")
    if yb is not None:    # (at most 8 outputs: one byte, on Python integers, "Sixth pass")
        v = fast["dec_byte"]
        for i in range(yb[1]):
            v ^= (out.item(i, 0, 0) & 1) << (7 - i)
        yb[0][0] = v
        return yb[0]
    y = out[:, 0, 0].astype(np.uint8)      # the output label's low byte; its bit 0 ...
    y ^= fast["dec"]                      # ... xor the decoding bit (``gcm.decode``)
    y &= 1
    return np.packbits(y)


def server_online(ep, fast: dict, C: str) -> None:
    """A server's whole online step (after ``online_phase`` is entered)."""
    if ep.me == "p0":        # classification: evaluate the comparison on both evaluators' labels
        ep.mark("shared")
        t, spec = fast["t_p0"], fast["k_spec"]
        # P1's labels, then P2's, each with its own ``recv`` (the transport's one-frame
        # receive): ~40 % fewer calls than ``recv_each``, which polled first and took the
        # general path for the first frame; which one comes first varies (docs/protocols/
        # astra.md, "Fourth pass"), and one that came first waits queued meanwhile
        # P1's labels go into the evaluator's buffer before the wait for P2's: one copy
        # less after the later frame when P2's comes later ("Seventh pass")
        np.copyto(fast["bx"].evaluator.u1, ep.recv("p1", t + "/k1", spec)[0])
        k2 = ep.recv("p2", t + "/k2", spec)[0]
        ep.send(C, "astra/out/y/y", _p0_step(fast, None, k2))
        return
    m_x = ep.recv(C, "astra/sh/X", fast["x_spec"])[0]
    ep.mark("shared")        # the evaluators hold [[x]]: the servers' online work starts
    ep.send(fast["send_to"], fast["tag"], _evaluator_step(fast, m_x))


def warm_server(fast: dict) -> None:
    """Offline (option ``warm_online``): a dry run of the server's online computation
    (``_evaluator_step`` / ``_p0_step``, the same code on the same buffers) on all-zero
    scratch inputs of the real shapes, right before the "ready": the first numpy / native
    call of a kind in a process pays its dispatch and type-resolution set-up (a uint64
    ``np.add`` 87 us the first time against 4 us after), so the online step would pay it.
    Nothing is sent, no key stream or PRG is drawn from, the results are discarded: every
    buffer written here is written again online before it is read (the evaluators' ``u``
    and labels; P0's evaluator's two input buffers and its output; its r labels and tables
    are only read)."""
    if "bx" in fast:                # P0 (classification)
        z = np.zeros(fast["k_spec"].shape, np.uint64)
        _p0_step(fast, z, z)
    elif "x_spec" in fast:          # an evaluator
        _evaluator_step(fast, np.zeros(fast["x_spec"].shape, np.uint64))


def expect_server(ep, fast: dict, C: str) -> None:
    """Offline: declare a server's online messages (``server_online``'s) to the endpoint, so
    that a transport with frame templates builds them now instead of on the first (and, at
    one query, only) frame of each tag (issue #23). Nothing is sent; the frames are the same."""
    role = ep.me
    if role == "p0":
        if fast["cls"]:
            for p, k in (("p1", "k1"), ("p2", "k2")):
                ep.expect_recv(p, f"astra/bx/{fast['bx_lab']}/{k}", fast["k_spec"].dtype, fast["k_spec"].shape)
            size = fast["k_spec"].shape[0]
            ep.expect_send(C, "astra/out/y/y", np.uint8, (-(-size // 8),))
        return
    xs = fast["x_spec"]
    ep.expect_recv(C, "astra/sh/X", xs.dtype, xs.shape)
    size = xs.shape[0] * fast["coef"].shape[1]
    if not fast["cls"]:
        ep.expect_send(C, "astra/out/y/" + ("m1" if role == "p1" else "m2"), np.uint64, (size,))
    else:
        ep.expect_send("p0", f"astra/bx/{fast['bx_lab']}/" + ("k1" if role == "p1" else "k2"),
                       fast["labels"].dtype, fast["labels"].shape)


def expect_client(ep, cls: bool, x_shape, size: int) -> None:
    """Offline: the client's online messages (``astra/sh/X`` out, its output parts in), as
    ``expect_server``."""
    for p in ("p1", "p2"):
        ep.expect_send(p, "astra/sh/X", np.uint64, tuple(x_shape))
    if cls:
        spec = packed_spec(1, (size,))
        ep.expect_recv("p0", "astra/out/y/y", spec.dtype, spec.shape)
    else:
        for p, k in (("p1", "m1"), ("p2", "m2")):
            ep.expect_recv(p, "astra/out/y/" + k, np.uint64, (size,))


def has_online(role: str, cls: bool) -> bool:
    """P0 takes part in the online phase only for a classifier (it evaluates the comparison)."""
    return role != "p0" or cls


def extra_sender(cls: bool) -> str:
    """Who sends the client its query-independent output part offline: P0 lambda_y, P1 r."""
    return "p1" if cls else "p0"


# ---- client ---------------------------------------------------------------------------------
def client_extra_spec(cls: bool, size: int) -> ArraySpec:
    """What ``extra_sender``'s "ready" carries on this path: lambda_y or r."""
    return packed_spec(1 if cls else 64, (size,))


def client_extra(cls: bool, size: int, a: np.ndarray) -> np.ndarray:
    """lambda_y (uint64) or r, one uint8 0/1 per output."""
    return np.unpackbits(a, count=size) if cls else unpack(a, 64, (size,))


def send_query(ep, peers, m: np.ndarray) -> None:
    """The client's masked query ``m`` to both evaluators, in the order of ``peers``: one
    ``send_many`` on an endpoint (the tcp transport seals both frames before the first
    write, so the second evaluator's copy leaves a system call after the first, not a whole
    send after it), else (a test's proxy around an endpoint) one ``send`` per peer, which
    the proxy sees. The same frames either way."""
    if isinstance(ep, Endpoint):
        ep.send_many(peers, "astra/sh/X", m)
    else:
        for p in peers:
            ep.send(p, "astra/sh/X", m)


ENCODE_ROWS = 128   # rows per pass of ``encode_masked``: ~0.8 MB of float64, cache-sized


def encode_buffers(shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offline: the scratch rows ``encode_masked`` works in, allocated and touched now (a
    fresh multi-megabyte array online costs its page faults: W1 at 1000 queries, 15 ms for
    the whole-array passes against 2 ms in cache-sized rows into these buffers); with the
    int64 rows' uint64 view, made now too."""
    rows = min(shape[0], ENCODE_ROWS)
    f, i = np.zeros((rows, shape[1])), np.zeros((rows, shape[1]), np.int64)
    f.fill(0.0)
    i.fill(0)
    return f, i, i.view(np.uint64)


def encode_masked(x: np.ndarray, frac: int, lam: np.ndarray, bufs) -> np.ndarray:
    """m_x = encode(x) + lambda_x over Z_2^64, added into ``lam`` (the client's own mask,
    not used afterwards) and returned: the operations of ``rep3.linear._enc`` (the same
    IEEE steps: x 2^f, + 0.5, floor, the float-to-int64 cast) on a query
    ``mdl.encode_input`` has already checked (finite, in range), four numpy calls per
    ``ENCODE_ROWS`` rows, in the buffers from ``encode_buffers``."""
    fb, ib, iu = bufs
    scale = float(2 ** frac)
    rows = fb.shape[0]
    if x.shape[0] == rows:   # (one pass, at most ``ENCODE_ROWS`` rows: no slices, "Seventh pass")
        np.multiply(x, scale, out=fb)
        fb += 0.5
        np.floor(fb, out=ib, casting="unsafe")
        np.add(lam, iu, out=lam)
        return lam
    for i in range(0, x.shape[0], rows):
        xs = x[i:i + rows]
        f, n = fb[:xs.shape[0]], ib[:xs.shape[0]]
        np.multiply(xs, scale, out=f)
        f += 0.5
        np.floor(f, out=n, casting="unsafe")        # floor, then the cast of ``astype(np.int64)``
        ls = lam[i:i + rows]
        np.add(ls, n.view(np.uint64), out=ls)
    return lam


def check_query(x: np.ndarray, frac: int, cfg) -> None:
    """Setup phase: ``mdl.encode_input``'s typed errors for a query that is not finite or does
    not fit the ring, before any message of it."""
    mdl.encode_input(x, frac, cfg)


def output_spec(cls: bool, size: int) -> ArraySpec:
    """Offline: the spec of the client's output message(s) on this path (built once, not
    on the online path)."""
    return packed_spec(1 if cls else 64, (size,))


def output_buffer(cls: bool, size: int) -> np.ndarray | None:
    """Offline: the regression's output buffer (``combine_output``), its pages written now."""
    return None if cls else np.full(size, 0, np.uint64)


def output_small(cls: bool, size: int, extra: np.ndarray):
    """Offline: what ``combine_output`` needs to reconstruct a small output without numpy
    calls online ("Sixth pass"): a classifier's at most 8 classes, the read-only table of
    ``unpackbits(y, count=size) xor r`` for every byte y (256 x size uint8); a regression's
    one value, lambda_y as a Python integer; else None."""
    if cls and size <= 8:
        tab = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)[:, :size] ^ extra
        tab.flags.writeable = False
        return tab
    if not cls and size == 1:
        return int(extra[0])
    return None


def combine_output(cls: bool, size: int, extra: np.ndarray, first, second, acc: np.ndarray | None,
                   small=None) -> np.ndarray:
    """The client's reconstruction, with P0's lambda_y / P1's r (``extra``, unpacked) received
    offline: y xor r (class: ``first()`` P0's packed y) or y = a - lambda_y + b into ``acc``
    (regression: ``first()`` P2's part a, subtracted before ``second()``, P1's part b, is
    waited for). ``small``: ``output_small(cls, size, extra)`` (the same result, from a
    table row or on Python integers mod 2^64)."""
    if cls:
        if small is not None:
            return small[first().item(0)]                     # 0/1 (uint8, a read-only row)
        return np.unpackbits(first(), count=size) ^ extra      # 0/1 (uint8)
    if small is not None:
        a = first().item(0) - small
        acc[0] = (a + second().item(0)) & _M64
        return acc
    np.subtract(first(), extra, out=acc)
    np.add(acc, second(), out=acc)
    return acc


def receive_output(ep, cls: bool, size: int, extra: np.ndarray, spec: ArraySpec | None = None,
                   acc: np.ndarray | None = None, small=None) -> np.ndarray:
    """The client's reveal (``combine_output``); ``spec``: ``output_spec(cls, size)``, ``acc``:
    ``output_buffer(cls, size)`` and ``small``: ``output_small(cls, size, extra)``, made
    offline."""
    if spec is None:
        spec = output_spec(cls, size)
    if cls:
        return combine_output(cls, size, extra, lambda: ep.recv("p0", "astra/out/y/y", spec)[0], None, None,
                              small)
    if acc is None:
        acc = output_buffer(cls, size)
    # P2's part, then P1's, each with its own ``recv``: a transport's one-frame receive (tcp:
    # the fast path) instead of ``recv_each``'s wait on both, which took the general path for
    # the first (as ``server_online``'s P0)
    return combine_output(cls, size, extra, lambda: ep.recv("p2", "astra/out/y/m2", spec)[0],
                          lambda: ep.recv("p1", "astra/out/y/m1", spec)[0], acc, small)


def warm_client(x: np.ndarray, frac: int, bufs, cls: bool, size: int, extra: np.ndarray,
                acc: np.ndarray | None, small=None) -> None:
    """Offline (option ``warm_online``, as ``warm_server``): a dry run of the client's online
    computation, ``encode_masked`` of its query into the real scratch rows with an all-zero
    mask in place of lambda_x (which stays untouched) and ``combine_output`` on all-zero
    parts into the real output buffer (overwritten online). Nothing is sent or drawn."""
    encode_masked(x, frac, np.zeros(x.shape, np.uint64), bufs)
    spec = output_spec(cls, size)
    z = np.zeros(spec.shape, spec.dtype)
    combine_output(cls, size, extra, lambda: z, lambda: z, acc, small)
