"""The semi-honest ``reveal="direct"`` online phase of ``astra`` prediction, precomputed.

Everything of a server's online step that does not depend on the query is folded into
constants in the offline phase, so that after the query arrives an evaluator runs one dot
product, one addition and a send (issue #23: on these 2-core machines every numpy call
made right after a wake-up costs tens of microseconds, so the count of calls on the
critical path is the latency). The messages and their contents are those of the generic
path in ``protocol._server_online`` (bit for bit, ``tests/astra/test_direct.py``) with two
differences, both in what arrives when, not in what anyone learns:

* P0's only message to the client (lambda_y of a regression output, the comparison's mask
  r of a class) depends on no query: it rides on P0's "ready" acknowledgement at the end of
  the offline phase (prepared sessions: on its lambda_x message), so P0 has no online
  phase at all;
* classification: P2's additive part of m_y goes to P1 only (P1 feeds m_a into the garbled
  comparison [ASTRA 5.4]; P2, the evaluator, never needs m_a, so P1's part no longer goes to
  P2: P2 sees less than in [ASTRA Fig. 3]'s exchange).

The client encodes and masks its query in one pass (``encode_masked``) after checking it in
the setup phase (``mdl.encode_input``'s typed errors, before any message of the query).
"""

from __future__ import annotations

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.crypto.gc import garble as gcm
from secinfer.crypto.gc.circuit import msb_sub_circuit
from secinfer.protocols.astra.engine import ring_dot
from secinfer.protocols.rep3 import linear as mdl
from secinfer.protocols.rep3.wire import pack, packed_spec, unpack
from secinfer.spec import ArraySpec

_ZERO = np.uint64(0)
_ONE = np.uint64(1)
_R64 = Ring(64)


def applies(security: str, direct: bool) -> bool:
    """This path serves the semi-honest direct reveal of a regression or a classifier (the
    same answer at every party: the job's security and reveal option)."""
    return direct and security == "semi-honest"


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b over Z_2^64, a fresh array: one numpy call for a matrix-vector product (uint64
    wraps mod 2^64; numpy's integer matmul is slow only for wide right-hand sides), else the
    limb-split ring product (``engine.ring_dot``)."""
    if b.shape[1] <= 4:
        return np.dot(a, b)
    return ring_dot(_R64, a, b)


def server_prep(eng, X, U, B, prep, bx, cls: bool, shift: int, rho) -> dict:
    """Offline: the constants of one server's online step (see the module docstring).

    Regression: Y = U + B, evaluator i sends [m_y]_i -/+ rho, P0 lambda_y (``open_parts_to``).
    Classification: A = 2^shift - 1 - Y, P1 needs m_a = c - m_b - base_1 - m_x coef_1 - [m_u]_2
    (``bitext_online``'s input)."""
    role, R = eng.role, eng.R
    batch, n = U.shape
    fast = {"cls": cls, "lab": prep.lab, "bx_lab": bx.lab if cls else None}
    if role == "p0":
        if cls:
            fast["to_client"] = (pack(bx.rbit, 1),)
        else:
            lam = R.add(R.add(U.l1, B.l1[None, :]), R.add(U.l2, B.l2[None, :]))
            fast["to_client"] = (pack(np.ascontiguousarray(lam).reshape(-1), 64),)
        return fast
    fast["x_spec"] = packed_spec(64, X.shape)
    fast["coef"] = np.ascontiguousarray(prep.coef)
    if not cls:
        off = R.add(prep.base, B.m[None, :]) if role == "p1" else prep.base
        r = rho.reshape(batch, n)
        fast["off"] = R.add(off, r) if role == "p1" else R.sub(off, r)
        return fast
    fast["part_spec"] = packed_spec(64, (batch, n))
    if role == "p1":
        c = np.uint64((1 << shift) - 1)
        # own = c - m_b - base_1 - m_x coef_1; m_a = own - [m_u]_2
        fast["k1"] = R.sub(R.sub(np.full((batch, n), c, np.uint64), B.m[None, :]), prep.base)
        fast["shifts"] = np.arange(64, dtype=np.uint64)[None, :]
        fast["zeros"], fast["r_gc"] = bx.zeros["u1"], bx.r_gc
    else:
        fast["off"] = prep.base
        fast["k1_spec"] = ArraySpec(np.uint64, (batch * n, 64, 2))
        fast["circ"], fast["bx"] = msb_sub_circuit(64), bx
    return fast


def server_online(ep, fast: dict, C: str) -> None:
    """An evaluator's whole online step (after ``online_phase`` is entered; P0 has none)."""
    role = ep.me
    m_x = ep.recv(C, "astra/sh/X", fast["x_spec"])[0]
    ep.mark("shared")        # the evaluators hold [[x]]: the servers' online work starts
    t = f"astra/mul/{fast['lab']}"
    if not fast["cls"]:
        part = _dot(m_x, fast["coef"])
        part += fast["off"]
        ep.send(C, "astra/out/y/" + ("m1" if role == "p1" else "m2"), part.reshape(-1))
        return
    if role == "p2":
        part = _dot(m_x, fast["coef"])
        part += fast["off"]
        ep.send("p1", t + "/mz", part)
        bx = fast["bx"]
        k1 = ep.recv("p1", f"astra/bx/{fast['bx_lab']}/k1", fast["k1_spec"])[0]
        out = gcm.evaluate_opened(fast["circ"], bx.tables, bx.wires, "u1", k1)
        y = gcm.decode(out, bx.dec)[:, 0]
        ep.send(C, "astra/out/y/y", np.packbits(y & np.uint8(1)))
        return
    own = fast["k1"] - (_dot(m_x, fast["coef"]))
    other = ep.recv("p2", t + "/mz", fast["part_spec"])[0]
    own -= other
    bits = (own.reshape(-1)[:, None] >> fast["shifts"]) & _ONE       # bits_of(m_a, 64)
    labels = fast["zeros"] ^ ((_ZERO - bits)[..., None] & fast["r_gc"])   # gcm.select
    ep.send("p2", f"astra/bx/{fast['bx_lab']}/k1", labels)


# ---- client ---------------------------------------------------------------------------------
def client_extra_spec(cls: bool, size: int) -> ArraySpec:
    """What P0's "ready" carries on this path: lambda_y (regression) or r (classification)."""
    return packed_spec(1 if cls else 64, (size,))


def client_extra(cls: bool, size: int, a: np.ndarray) -> np.ndarray:
    return unpack(a, 1 if cls else 64, (size,))


def encode_masked(x: np.ndarray, frac: int, lam: np.ndarray) -> np.ndarray:
    """m_x = encode(x) + lambda_x over Z_2^64 in four numpy calls: the operations of
    ``rep3.linear._enc`` (the same IEEE steps: x 2^f, + 0.5, floor, to int64) on a query
    ``mdl.encode_input`` has already checked (finite, in range)."""
    v = x * float(2 ** frac)
    v += 0.5
    np.floor(v, out=v)
    m = v.astype(np.int64).view(np.uint64)
    m += lam
    return m


def check_query(x: np.ndarray, frac: int, cfg) -> None:
    """Setup phase: ``mdl.encode_input``'s typed errors for a query that is not finite or does
    not fit the ring, before any message of it."""
    mdl.encode_input(x, frac, cfg)


def receive_output(ep, cls: bool, size: int, extra: np.ndarray) -> np.ndarray:
    """The client's reveal: y = part_1 + part_2 - lambda_y (regression) or y xor r (class),
    with P0's lambda_y / r already received offline (``extra``, unpacked)."""
    if cls:
        y = ep.recv("p2", "astra/out/y/y", packed_spec(1, (size,)))[0]
        return (unpack(y, 1, (size,)) ^ extra) & _ONE
    spec = packed_spec(64, (size,))
    acc = None
    for p, a in ep.recv_each({"p1": ("astra/out/y/m1", spec), "p2": ("astra/out/y/m2", spec)}):
        if acc is None:
            acc = a[0] - extra
        else:
            acc += a[0]
    return acc
