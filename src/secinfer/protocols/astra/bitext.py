"""Pi_BitExt^s and Pi_BitExt^m [ASTRA 5.4]: [[msb(a)]]^B from [[a]] in the garbled world.

P0 and P1 garble together from their shared key k_01 (identical circuits, free-XOR +
half gates, ``secinfer.crypto.gc``), P2 evaluates; constant online rounds.

Semi-honest: circuit y = msb(u1 - u2) xor u3 with u1 = m_a, u2 = lambda_a, u3 = r (r from
k_01). Offline P0 sends the garbled tables, the labels of lambda_a and r and the decoding
bits to P2; P1 [[.]]^B-shares r (Pi_sh^s). Online P1 sends the labels of m_a (l kappa bits),
P2 evaluates and shares y (one bit to P1); [[msb(a)]]^B = [[y]]^B xor [[r]]^B.

Malicious: y = msb(u1 - u2 - u3) xor u4 xor u5 with u1 = m_a, u2 = lambda_{a,1},
u3 = lambda_{a,2}, u4 = r1 (k_01), u5 = r2 (k_02). Offline P1 sends the garbled circuit,
the decoding bits, the labels of the inputs both garblers know (u2, u4) and hash
commitments to both labels of every bit of u1, u3, u5; P0 sends a hash of that whole bundle
(check "gc-consistency"). P0 opens the committed labels of u3 and u5 (P2 checks them against
the commitments: check "gc-key"). r1, r2 are [[.]]^B-shared by P1 / P2 with P0 vouching by
hash. Online P1 opens the labels of m_a (checked against the commitments), P2 evaluates,
sends y and H(output label) to P1, who checks y against the output labels it knows (check
"bitext-y"); P1 and P2 both know y (it is masked by r2 / r1 and r2), so [[y]]^B = (y, 0, 0)
needs no further message. [[msb(a)]]^B = [[y]]^B xor [[r1]]^B xor [[r2]]^B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from secinfer.crypto.gc import garble as gcm
from secinfer.errors import ConfigError
from secinfer.crypto.gc.circuit import bits_of, msb_sub3_circuit, msb_sub_circuit
from secinfer.net.channel import ArraySpec
from secinfer.protocols.rep3.digest import H_SPEC, digest
from secinfer.protocols.rep3.wire import pack
from secinfer.sharing.astra import AShare


def _rand(eng, key: str, label: str):
    s = eng.keys.stream(key, label)
    return lambda shape: s.ring(tuple(shape), 64)


def _bit(eng, key, label, shape):
    return eng.keys.stream(key, label).ring(tuple(shape), 1).astype(np.uint8)


@dataclass
class BitExtPrep:
    """The offline state of one Pi_BitExt [ASTRA 5.4] for its online half."""

    lab: str
    n: int
    r_gc: np.ndarray | None = None     # the garblers' free-XOR offset and zero labels
    zeros: dict | None = None
    rbit: np.ndarray | None = None     # semi-honest: the output mask r (P0; P1, P2 in direct.py)
    r: AShare | None = None            # semi-honest: [[r]]^B
    tables: np.ndarray | None = None   # the evaluator's garbled tables, decoding bits, wires
    dec: np.ndarray | None = None
    wires: np.ndarray | None = None
    evaluator: object = None           # direct.py: P0's bound evaluator (``gcm.RippleEvaluator``)
    c1: np.ndarray | None = None       # malicious: commitments of u1's labels
    out_zero: np.ndarray | None = None  # malicious, garblers: the output's zero labels
    r1: AShare | None = None           # malicious: [[r1]]^B, [[r2]]^B
    r2: AShare | None = None
    ly2: np.ndarray | None = None      # lambda_{y,2} of the output (P0, P2)


def bitext_offline(eng, a: AShare, bool_eng) -> BitExtPrep:
    """Offline half; ``a`` is a mask-only share of shape (n,). Returns the prep state."""
    n = a.shape[0]
    lab = eng._label("bitext")
    # the evaluator's native library and gate program: loaded and built here, not online
    gcm.prepare(msb_sub3_circuit(eng.bits) if eng.malicious else msb_sub_circuit(eng.bits))
    if eng.malicious:
        return _offline_m(eng, a, bool_eng, n, lab)
    return _offline_s(eng, a, bool_eng, n, lab)


def bitext_online(eng, a: AShare, prep: BitExtPrep, bool_eng, to: str | None = None,
                  pending_verify: dict | None = None) -> AShare | None:
    """Online half: [[msb(a)]]^B; or, malicious with ``to`` (the client), the state for
    ``open_direct_to`` (``_online_m_direct``). The semi-honest direct reveal of a class is
    ``direct.server_online`` (the comparison garbled by P1, P2, evaluated by P0)."""
    if eng.malicious:
        if to is not None:
            return _online_m_direct(eng, a, prep, pending_verify)
        return _online_m(eng, a, prep, bool_eng, pending_verify)
    if to is not None:
        raise ConfigError("semi-honest: the direct reveal of a class is direct.server_online's")
    return _online_s(eng, a, prep, bool_eng)


# ---- semi-honest ------------------------------------------------------------------------
def _offline_s(eng, a, beng, n, lab):
    ep, role, l = eng.ep, eng.role, eng.bits
    circ = msb_sub_circuit(l)
    t = f"astra/bx/{lab}"
    prep = BitExtPrep(lab, n)
    bspec = ArraySpec(np.uint64, (n,))
    if role in ("p0", "p1"):
        r_gc, zeros = gcm.input_labels(circ, n, _rand(eng, "01", lab + "/gc"))
        rbit = _bit(eng, "01", lab + "/r", (n,))
        lr1 = beng.draw("01", lab + "/lr", (n,))
        lr2 = beng.draw("P", lab + "/lr", (n,))
        prep.r_gc, prep.zeros = r_gc, zeros
        if role == "p0":
            g = gcm.garble(circ, r_gc, zeros)
            lam = eng.R.add(a.l1, a.l2)
            ep.send("p2", t + "/gc", g.tables, g.decode,
                    gcm.select(zeros["u2"], bits_of(lam, l), r_gc),
                    gcm.select(zeros["u3"], rbit[:, None], r_gc))
            prep.r = AShare(1, None, lr1, lr2)
            prep.rbit = rbit
        else:
            mr = (rbit.astype(np.uint64) ^ lr1 ^ lr2)
            ep.send("p2", t + "/mr", mr)
            prep.r = AShare(1, mr, lr1, None)
    else:
        na = circ.and_count
        tables, dec, k2, k3 = ep.recv("p0", t + "/gc", ArraySpec(np.uint64, (n, na, 2, 2)),
                                      ArraySpec(np.uint8, (n, 1)), ArraySpec(np.uint64, (n, l, 2)),
                                      ArraySpec(np.uint64, (n, 1, 2)))
        lr2 = beng.draw("P", lab + "/lr", (n,))
        mr = ep.recv_one("p1", t + "/mr", bspec) & np.uint64(1)
        prep.tables, prep.dec, prep.r = tables, dec, AShare(1, mr, None, lr2)
        prep.wires = gcm.wire_buffer(circ, {"u2": k2, "u3": k3})   # online: only u1's labels
        _warm_evaluator(circ, prep)
    if role in ("p0", "p2"):
        prep.ly2 = beng.draw("02", lab + "/ly", (n,))
    return prep


def _online_s(eng, a, prep, beng):
    ep, role, l, n = eng.ep, eng.role, eng.bits, prep.n
    circ = msb_sub_circuit(l)
    t = f"astra/bx/{prep.lab}"
    if role == "p1":
        ep.send("p2", t + "/k1", gcm.select(prep.zeros["u1"], bits_of(a.m, l), prep.r_gc))
        my = ep.recv_one("p2", t + "/my", ArraySpec(np.uint8, (n,))).astype(np.uint64) & np.uint64(1)
        y = AShare(1, my, np.zeros(n, np.uint64), None)
    elif role == "p2":
        k1 = ep.recv_one("p1", t + "/k1", ArraySpec(np.uint64, (n, l, 2)))
        out = gcm.evaluate_opened(circ, prep.tables, prep.wires, "u1", k1)
        yb = gcm.decode(out, prep.dec)[:, 0].astype(np.uint64)
        my = yb ^ prep.ly2
        ep.send("p1", t + "/my", my.astype(np.uint8))
        y = AShare(1, my, None, prep.ly2)
    else:
        y = AShare(1, None, np.zeros(n, np.uint64), prep.ly2)
    return y + prep.r


# ---- malicious --------------------------------------------------------------------------
def _offline_m(eng, a, beng, n, lab):
    ep, role, l = eng.ep, eng.role, eng.bits
    circ = msb_sub3_circuit(l)
    t = f"astra/bx/{lab}"
    prep = BitExtPrep(lab, n)
    na = circ.and_count
    bundle_specs = (ArraySpec(np.uint64, (n, na, 2, 2)), ArraySpec(np.uint8, (n, 1)),
                    ArraySpec(np.uint64, (n, l, 2)), ArraySpec(np.uint64, (n, 1, 2)),
                    ArraySpec(np.uint8, (n, l, 2, 32)), ArraySpec(np.uint8, (n, l, 2, 32)),
                    ArraySpec(np.uint8, (n, 1, 2, 32)))
    bspec = ArraySpec(np.uint64, (n,))
    if role in ("p0", "p1"):
        r_gc, zeros = gcm.input_labels(circ, n, _rand(eng, "01", lab + "/gc"))
        g = gcm.garble(circ, r_gc, zeros)
        r1 = _bit(eng, "01", lab + "/r1", (n,))
        lr1 = beng.draw("01", lab + "/lr1", (n,))
        bundle = [g.tables, g.decode, gcm.select(zeros["u2"], bits_of(a.l1, l), r_gc),
                  gcm.select(zeros["u4"], r1[:, None], r_gc), gcm.commit_labels(zeros["u1"], r_gc),
                  gcm.commit_labels(zeros["u3"], r_gc), gcm.commit_labels(zeros["u5"], r_gc)]
        prep.r_gc, prep.zeros, prep.out_zero = r_gc, zeros, g.out_zero
        mr1 = r1.astype(np.uint64) ^ lr1
        if role == "p1":
            ep.send("p2", t + "/gc", *bundle)
            ep.send("p2", t + "/mr1", mr1)
            prep.r1 = AShare(1, mr1, lr1, None)
        else:
            ep.send("p2", t + "/gch", digest("gc", *bundle))
            eng.send_hash("p2", "bitext-share", mr1)
            r2 = _bit(eng, "02", lab + "/r2", (n,))
            lr2 = beng.draw("02", lab + "/lr2", (n,))
            mr2 = r2.astype(np.uint64) ^ lr2
            eng.send_hash("p1", "bitext-share", mr2)
            k3 = gcm.select(zeros["u3"], bits_of(a.l2, l), r_gc)
            k5 = gcm.select(zeros["u5"], r2[:, None], r_gc)
            ep.send("p2", t + "/open", k3, k5)
            prep.r1 = AShare(1, None, lr1, np.zeros(n, np.uint64))
            prep.r2 = AShare(1, None, np.zeros(n, np.uint64), lr2)
    if role == "p1":
        mr2 = ep.recv_one("p2", t + "/mr2", bspec)
        eng.expect_hash("p0", "bitext-share", mr2)
        prep.r2 = AShare(1, mr2, np.zeros(n, np.uint64), None)
    if role == "p2":
        bundle = ep.recv("p1", t + "/gc", *bundle_specs)
        h = ep.recv_one("p0", t + "/gch", H_SPEC)
        ep.require(np.array_equal(h, digest("gc", *bundle)), "gc-consistency", None,
                   "garbled circuits from P0 and P1 differ")
        mr1 = ep.recv_one("p1", t + "/mr1", bspec)
        eng.expect_hash("p0", "bitext-share", mr1)
        r2 = _bit(eng, "02", lab + "/r2", (n,))
        lr2 = beng.draw("02", lab + "/lr2", (n,))
        mr2 = r2.astype(np.uint64) ^ lr2
        ep.send("p1", t + "/mr2", mr2)
        k3, k5 = ep.recv("p0", t + "/open", ArraySpec(np.uint64, (n, l, 2)), ArraySpec(np.uint64, (n, 1, 2)))
        tables, dec, k2, k4, c1, c3, c5 = bundle
        _check_open(ep, k3, c3, bits_of(a.l2, l), "p0")
        _check_open(ep, k5, c5, r2[:, None], "p0")
        prep.tables, prep.dec, prep.c1 = tables, dec, c1
        prep.wires = gcm.wire_buffer(circ, {"u2": k2, "u3": k3, "u4": k4, "u5": k5})
        _warm_evaluator(circ, prep)
        prep.r1, prep.r2 = AShare(1, mr1, None, np.zeros(n, np.uint64)), AShare(1, mr2, None, lr2)
    return prep


def _warm_evaluator(circ, prep) -> None:
    """P2, offline: one throwaway evaluation of the first instance on all-zero labels of
    u1, into a copy of its wires (the output is garbage and dropped; nothing is sent, no
    commitment is consulted), so that the native call's first-use costs (1-6 ms measured:
    code pages, the cgo thread set-up, the fixed-key cipher) are paid here and not by the
    online evaluation (issue #23: nothing is loaded or set up inside an online phase)."""
    width = len(circ.inputs["u1"])
    gcm.evaluate_opened(circ, np.ascontiguousarray(prep.tables[:1]), prep.wires[:1].copy(), "u1",
                        np.zeros((1, width, 2), np.uint64))


def _open_eval(ep, circ, prep, k1, m):
    """P2's online step [ASTRA 5.4]: P1's labels of m_a against their commitments (check
    "gc-key"), then the evaluation -- one native call (``gcm.evaluate_opened``)."""
    out = gcm.evaluate_opened(circ, prep.tables, prep.wires, "u1", k1, prep.c1, m)
    ep.require(out is not None, "gc-key", "p1", "an opened input label does not match its commitment")
    return out


def _check_open(ep, keys, coms, bits, suspect):
    ep.require(gcm.labels_match(keys, coms, bits), "gc-key", suspect, "an opened input label does not match its commitment")


def _online_m(eng, a, prep, beng, pending=None):
    """``pending``: a verify message started before (``AstraEngine.verify_start``); the
    other evaluator's is received before that evaluator's next frame (ordered links)."""
    ep, role, l, n = eng.ep, eng.role, eng.bits, prep.n

    def verified(peer):
        if pending is not None:
            eng.verify_finish(pending, (peer,))
    circ = msb_sub3_circuit(l)
    t = f"astra/bx/{prep.lab}"
    zero = np.zeros(n, np.uint64)
    if role == "p1":
        ep.send("p2", t + "/k1", gcm.select(prep.zeros["u1"], bits_of(a.m, l), prep.r_gc))
        verified("p2")
        y, hout = ep.recv("p2", t + "/y", ArraySpec(np.uint8, (n,)), H_SPEC)
        y = y & np.uint8(1)
        expect = gcm.select(prep.out_zero[:, 0], y, prep.r_gc)
        ep.require(np.array_equal(hout, digest("gc-out", expect)), "bitext-y", "p2", "y does not match the output label")
        ys = AShare(1, y.astype(np.uint64), zero, None)
    elif role == "p2":
        verified("p1")
        k1 = ep.recv_one("p1", t + "/k1", ArraySpec(np.uint64, (n, l, 2)))
        out = _open_eval(ep, circ, prep, k1, a.m)
        yb = gcm.decode(out, prep.dec)[:, 0]
        ep.send("p1", t + "/y", yb, digest("gc-out", out[:, 0]))
        ys = AShare(1, yb.astype(np.uint64), None, zero)
    else:
        ys = AShare(1, None, zero, zero)
    return ys + prep.r1 + prep.r2


def _out_label_hashes(labels: np.ndarray) -> np.ndarray:
    """H("gc-out" || label) of each of n output labels (n, 2) uint64 -> (n, 32) uint8."""
    return gcm.label_hash(labels, prefix=b"gc-out")


def _online_m_direct(eng, a, prep, pending):
    """Malicious online half whose output goes to the client straight from P2 (reveal
    "direct"): P1 sends the labels of m_a and is done; P2 evaluates and keeps y and the
    hash of its output label; P0 prepares the hashes of both output labels of every value
    (it garbled them). ``open_direct_to`` then sends the client y and H(L_y) from P2 and the
    pair (H(L_0), H(L_1)) from P0, and the client runs the check "bitext-y" that P1 runs in
    [ASTRA 5.4]: a corrupt P2 cannot name the label of the other bit (P0 and P1 are honest
    then, so the pair is right). Returns the state for ``open_direct_to``."""
    ep, role, l, n = eng.ep, eng.role, eng.bits, prep.n
    circ = msb_sub3_circuit(l)
    t = f"astra/bx/{prep.lab}"
    st = {"rest": prep.r1 + prep.r2}     # [[msb(a)]]^B = y xor [[r1 xor r2]]^B
    if role == "p1":
        ep.send("p2", t + "/k1", gcm.select(prep.zeros["u1"], bits_of(a.m, l), prep.r_gc))
    elif role == "p2":
        if pending is not None:
            eng.verify_finish(pending, ("p1",))   # P1's verify message precedes its labels
        k1 = ep.recv_one("p1", t + "/k1", ArraySpec(np.uint64, (n, l, 2)))
        out = _open_eval(ep, circ, prep, k1, a.m)
        yb = gcm.decode(out, prep.dec)[:, 0]
        st.update(y=yb.astype(np.uint64) & np.uint64(1), hy=_out_label_hashes(out[:, 0]))
    else:
        zero = prep.out_zero[:, 0]
        st["pair"] = np.stack([_out_label_hashes(zero), _out_label_hashes(zero ^ prep.r_gc)], axis=1)
    return st


def open_direct_to(beng, receiver: str, st: dict, label: str) -> None:
    """Pi_rec^m [ASTRA Fig. 6] of [[r1 xor r2]]^B towards ``receiver``, plus y and the output-label
    check material (see ``_online_m_direct``); run after ``verify``."""
    rest, role, t = st["rest"], beng.role, f"astra/out/{label}"
    beng.require_verified()
    if role == "p0":
        beng.ep.send(receiver, t + "/l1", pack(rest.l1, 1), digest("out", rest.l2), st["pair"])
    elif role == "p1":
        beng.ep.send(receiver, t + "/m", pack(rest.m, 1), digest("out", rest.l1))
    else:
        beng.ep.send(receiver, t + "/l2", pack(rest.l2, 1), digest("out", rest.m), pack(st["y"], 1), st["hy"])


def output_mask(eng, prep: BitExtPrep) -> AShare:
    """The lambda-part of [[msb(a)]]^B, known after the offline phase (used by Pi_fRec's
    offline commitments)."""
    n, role = prep.n, eng.role
    zero = np.zeros(n, np.uint64)

    def lam_only(s: AShare) -> AShare:
        return AShare(1, None, s.l1, s.l2)
    if eng.malicious:
        y = AShare(1, None, zero if role in ("p0", "p1") else None, zero if role in ("p0", "p2") else None)
        return y + lam_only(prep.r1) + lam_only(prep.r2)
    y = AShare(1, None, zero if role in ("p0", "p1") else None, prep.ly2 if role in ("p0", "p2") else None)
    return y + lam_only(prep.r)
