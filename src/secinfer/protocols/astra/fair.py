"""Pi_fRec [ASTRA 4.3, Fig. 10]: fair reconstruction with commitments and proofs of origin.

Offline: P0, P1 commit lambda_{y,1} and a random r1 to P2; P0, P2 commit lambda_{y,2} and r2
to P1 (commitment randomness from the pair's PRF key, so both members send identical
commitments; check "frec-commit").
Online: P1, P2 commit m_y to P0. P0 answers "continue" to both, or -- if the commitments
differ -- (abort, opening of r2) to P1 and (abort, opening of r1) to P2. P1 and P2 forward
what they got to each other. An evaluator aborts iff it holds a *valid* proof of origin:
an opening of r2 (for P1) that can only have come from P0, or an opening of r1 forwarded by
P2 (which P2 can only have obtained from P0). Otherwise everyone opens: P0, P1 -> lambda_1 to
P2; P0, P2 -> lambda_2 to P1; P1, P2 -> m_y to P0, and each receiver keeps the opening that
matches the agreed commitment. A missing or malformed message never makes an honest party
stop (that would let a corrupt party split the honest ones); only valid proofs do.

Com(x; s) = SHA-256("astra-com" || x || s) with a 128-bit s, opening (x, s) [ASTRA 4.3].
One commitment covers the whole output vector (amortised). r1, r2 serve all instances.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from secinfer.errors import FrameError, PeerAbortedError, PeerDeadError, TimeoutError_
from secinfer.net.channel import ArraySpec

_MISSING = (PeerAbortedError, PeerDeadError, TimeoutError_, FrameError)
_H = ArraySpec(np.uint8, (32,))
_S = ArraySpec(np.uint8, (16,))


def com(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    h = hashlib.sha256(b"astra-com" + np.ascontiguousarray(x).tobytes() + s.tobytes())
    return np.frombuffer(h.digest(), np.uint8)


def _try_recv(ep, peer, tag, *specs):
    try:
        return ep.recv(peer, tag, *specs)
    except _MISSING:
        ep._aborted = None   # a peer's abort is a missing message here, not ours to obey
        return None


def _try_send(ep, peer, tag, *arrays):
    try:
        ep.send(peer, tag, *arrays)
    except _MISSING:
        ep._aborted = None


def _rand_bytes(eng, key, label):
    return np.frombuffer(eng.keys.stream(key, label).bytes(16), np.uint8)


@dataclass
class FrecPrep:
    """The offline state of Pi_fRec [ASTRA Fig. 10]: pads, openings' salts, commitments."""

    n: tuple
    r1: np.ndarray | None = None
    s_r1: np.ndarray | None = None
    s_l1: np.ndarray | None = None
    r2: np.ndarray | None = None
    s_r2: np.ndarray | None = None
    s_l2: np.ndarray | None = None
    com_l: np.ndarray | None = None
    com_r: np.ndarray | None = None
    com_m: np.ndarray | None = None


def frec_offline(eng, y, label: str) -> FrecPrep:
    ep, role = eng.ep, eng.role
    t = f"astra/frec/{label}"
    n = y.shape
    prep = FrecPrep(n)
    if role in ("p0", "p1"):
        prep.r1 = eng.draw("01", t + "/r1", (1,))
        prep.s_r1 = _rand_bytes(eng, "01", t + "/sr1")
        prep.s_l1 = _rand_bytes(eng, "01", t + "/sl1")
        ep.send("p2", t + "/c1", com(y.l1, prep.s_l1), com(prep.r1, prep.s_r1))
    if role in ("p0", "p2"):
        prep.r2 = eng.draw("02", t + "/r2", (1,))
        prep.s_r2 = _rand_bytes(eng, "02", t + "/sr2")
        prep.s_l2 = _rand_bytes(eng, "02", t + "/sl2")
        ep.send("p1", t + "/c2", com(y.l2, prep.s_l2), com(prep.r2, prep.s_r2))
    if role in ("p1", "p2"):
        src, name = ("p0", "c2") if role == "p1" else ("p0", "c1")
        other = "p2" if role == "p1" else "p1"
        a = ep.recv(src, f"{t}/{name}", _H, _H)
        b = ep.recv(other, f"{t}/{name}", _H, _H)
        ep.require(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), "frec-commit", None,
                   "the two commitments of a common share differ")
        prep.com_l, prep.com_r = a[0], a[1]
    return prep


def frec_online(eng, y, prep: FrecPrep, label: str) -> np.ndarray:
    """Returns y at every server, or raises ProtocolAbort (then no honest server has y)."""
    ep, role, R = eng.ep, eng.role, eng.R
    t = f"astra/frec/{label}"
    n = prep.n
    vspec = ArraySpec(np.uint64, n)
    sig_specs = (ArraySpec(np.uint8, (1,)), ArraySpec(np.uint64, (1,)), _S)
    if role in ("p1", "p2"):
        s_m = _rand_bytes(eng, "12", t + "/sm")
        cm = com(y.m, s_m)
        _try_send(ep, "p0", t + "/cm", cm)
    else:
        c1 = _try_recv(ep, "p1", t + "/cm", _H)
        c2 = _try_recv(ep, "p2", t + "/cm", _H)
        ok = c1 is not None and c2 is not None and np.array_equal(c1[0], c2[0])
        flag = np.zeros(1, np.uint8)
        cont = (flag, np.zeros(1, np.uint64), np.zeros(16, np.uint8))
        abort_to_p1 = (flag + 1, prep.r2, prep.s_r2)
        abort_to_p2 = (flag + 1, prep.r1, prep.s_r1)
        if ok:
            _try_send(ep, "p1", t + "/sig", *cont)
            _try_send(ep, "p2", t + "/sig", *cont)
        else:
            _try_send(ep, "p1", t + "/sig", *abort_to_p1)
            _try_send(ep, "p2", t + "/sig", *abort_to_p2)
        ep.require(ok, "frec-commit-m", None, "P1 and P2 committed to different m_y")
        prep.com_m = c1[0] if c1 is not None else (c2[0] if c2 is not None else None)
    if role in ("p1", "p2"):
        other = "p2" if role == "p1" else "p1"
        sig = _try_recv(ep, "p0", t + "/sig", *sig_specs)
        fwd = sig if sig is not None else (np.zeros(1, np.uint8), np.zeros(1, np.uint64), np.zeros(16, np.uint8))
        _try_send(ep, other, t + "/fwd", *fwd)
        got = _try_recv(ep, other, t + "/fwd", *sig_specs)
        if role == "p1":
            direct = sig is not None and sig[0][0] == 1 and np.array_equal(com(sig[1], sig[2]), prep.com_r)
            relayed = got is not None and got[0][0] == 1 and np.array_equal(got[1], prep.r1) \
                and np.array_equal(got[2], prep.s_r1)
        else:
            direct = sig is not None and sig[0][0] == 1 and np.array_equal(com(sig[1], sig[2]), prep.com_r)
            relayed = got is not None and got[0][0] == 1 and np.array_equal(got[1], prep.r2) \
                and np.array_equal(got[2], prep.s_r2)
        ep.require(not (direct or relayed), "frec-abort", "p0", "P0 signalled abort (proof of origin verified)")
    # openings
    if role == "p0":
        _try_send(ep, "p2", t + "/o1", y.l1, prep.s_l1)
        _try_send(ep, "p1", t + "/o2", y.l2, prep.s_l2)
        cands = [_try_recv(ep, p, t + "/om", vspec, _S) for p in ("p1", "p2")]
        m = _pick(cands, prep.com_m)
        l1, l2 = y.l1, y.l2
    elif role == "p1":
        _try_send(ep, "p2", t + "/o1", y.l1, prep.s_l1)
        _try_send(ep, "p0", t + "/om", y.m, s_m)
        cands = [_try_recv(ep, "p0", t + "/o2", vspec, _S), _try_recv(ep, "p2", t + "/o2", vspec, _S)]
        l2 = _pick(cands, prep.com_l)
        m, l1 = y.m, y.l1
    else:
        _try_send(ep, "p1", t + "/o2", y.l2, prep.s_l2)
        _try_send(ep, "p0", t + "/om", y.m, s_m)
        cands = [_try_recv(ep, "p0", t + "/o1", vspec, _S), _try_recv(ep, "p1", t + "/o1", vspec, _S)]
        l1 = _pick(cands, prep.com_l)
        m, l2 = y.m, y.l2
    ep.require(m is not None and l1 is not None and l2 is not None, "frec-open", None,
               "no opening matched the agreed commitment")
    return R.sub(R.sub(m, l1), l2)


def _pick(cands, commitment):
    if commitment is None:
        return None
    for c in cands:
        if c is not None and np.array_equal(com(c[0], c[1]), commitment):
            return c[0]
    return None
