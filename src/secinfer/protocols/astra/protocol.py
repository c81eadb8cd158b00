"""``astra``: three-server secure prediction over Z_2^64 [ASTRA 5], as a secinfer protocol.

Roles: servers p0 (distributor), p1, p2 (evaluators), the model owner M and the client C.
Securities: semi-honest [ASTRA 4.1], malicious with abort [ASTRA 4.2], fair [ASTRA 4.3].

Message flow (one session, batch of B queries of K features, N outputs):

setup    keys [ASTRA 2.2] (``keys.py``); M -> all: public header (K, N, classifier, f_w) and
         the two class labels; C -> servers: B.
offline  masks of every input (Pi_sh offline), Pi_dp offline (gamma; malicious: chi, Pi_trip,
         Pi_prc), Pi_BitExt offline for classifiers (garbled circuits), fair: Pi_fRec
         commitments. M shares W and b here (they do not depend on the query).
online   C shares its query (m_x to P1, P2), Pi_dp online, + b, [Pi_BitExt online],
         malicious: ``verify`` (all amortised hash checks), then reconstruction towards C
         (Pi_rec^m: value + hash per component) or, fair, Pi_fRec among the servers of the
         output masked by C's random pad followed by a 2-of-3 vote at C.

The client truncates the reconstructed value exactly (``model.oracle``), so regression
outputs are bit-identical to the fixed-point oracle; classifiers output class labels.
"""

from __future__ import annotations

import gc

import numpy as np

from secinfer.errors import PeerAbortedError, ProtocolError, ShapeError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.astra import direct as fastpath
from secinfer.protocols.astra.bitext import bitext_offline, bitext_online, open_direct_to
from secinfer.protocols.astra.engine import AstraEngine
from secinfer.protocols.base import (Check, PartyJob, PartyResult, Prep, ProtocolSpec, bool_option, prep_rows,
                                     refuse_unpreparable)
from secinfer.protocols.rep3 import linear as mdl
from secinfer.protocols.rep3.blas import one_blas_thread
from secinfer.protocols.rep3.digest import digest, digest_bytes
from secinfer.protocols.rep3.keys import setup_keys
from secinfer.protocols.rep3.session import await_close, close, header, online_phase, repeat_queries
from secinfer.protocols.rep3.wire import pack, packed_spec, unpack
from secinfer.sharing.astra import AShare

SERVERS = ("p0", "p1", "p2")
_ACK = ArraySpec(np.uint8, (1,))
M, C = "model_owner", "client"
ROLES = SERVERS + (M, C)


def _owner_lambda(keys, owner: str, label: str, shape, bits: int) -> np.ndarray:
    k1, k2 = AstraEngine.mask_keys(owner)
    a = keys.stream(k1, label).ring(tuple(shape), bits)
    b = keys.stream(k2, label).ring(tuple(shape), bits)
    return (a + b) & (np.uint64(0xFFFFFFFFFFFFFFFF) if bits == 64 else np.uint64((1 << bits) - 1))


def _owner_send(ep, keys, owner, label, x, bits, lam=None):
    """Pi_sh by an outside owner: m = x + lambda to P1 and P2 (``lam`` precomputed offline,
    or drawn here)."""
    if lam is None:
        lam = _owner_lambda(keys, owner, label, x.shape, bits)
    m = (np.asarray(x, np.uint64) + lam)
    if bits < 64:
        m &= np.uint64((1 << bits) - 1)
    ep.send("p1", f"astra/sh/{label}", pack(m, bits))
    ep.send("p2", f"astra/sh/{label}", pack(m, bits))


def receiver_checked(job: PartyJob, classifier: bool) -> bool:
    """Receiver-checked products (docs/protocols/astra.md): malicious with abort and
    ``reveal="direct"``: the client runs the mul-mz comparison on a revealed product.
    Regression only: the output is then linear in m_z, so a wrong m_z that reaches the
    client tells it nothing beyond y; a comparison of a shifted m_z would (the evaluators
    check classification products before the garbled comparison's output leaves)."""
    return job.security == "malicious" and reveal_mode(job.options) == "direct" and not classifier


def run_party(role: str, ep, job: PartyJob) -> PartyResult:
    try:
        with one_blas_thread():
            return repeat_queries(role, ep, job, _run_party)
    except PeerAbortedError as e:
        # relay: a peer's abort reaches every party, so nobody waits for a message that
        # will never come; the session's secrets die with this call's locals
        ep.abort(e.check, e.suspect, e.detail)
        raise


def _run_party(role: str, ep, job: PartyJob) -> PartyResult:
    if role not in ROLES:
        raise ProtocolError(f"astra has no role {role!r}; roles: {ROLES}")
    if job.security not in SPEC.securities:
        raise ProtocolError(f"astra security must be one of {SPEC.securities}")
    malicious = job.security != "semi-honest"
    reveal_mode(job.options)   # a bad value fails at once, in every party
    warm_online(job.options)
    with ep.phase("setup"):
        keys = setup_keys(ep, role, job.prg, malicious)
        lm, k, n, cls, fw, classes, _ = header(ep, role, job)
        if role == C:
            x = _send_query_shape(ep, job, k)
            batch = x.shape[0]
        elif role in SERVERS:
            bs = [int(ep.recv_one(C, "astra/batch", ArraySpec(np.int64, (1,)))[0]) for _ in range(1)]
            batch = bs[0]
            if not 1 <= batch <= 1 << 20:
                raise ProtocolError(f"client asked for batch size {batch}")
        else:
            batch = None
    shape = {"X": (batch, k) if batch else None, "W": (k, n), "b": (n,), "out": (batch, n) if batch else None}
    fair = job.security == "fair"
    if role == M:
        return _run_owner(ep, keys, lm, job)
    if role == C:
        return _run_client(ep, keys, job, x, n, cls, fw, classes, fair, malicious)
    return _run_server(ep, role, keys, job, shape, cls, fair, fw[0] + fw[1] - job.fixed.frac_bits)


def _run_owner(ep, keys, lm, job) -> PartyResult:
    cfg = job.fixed
    w, b = lm.encode(cfg)
    with ep.phase("offline"):
        # M's inputs do not depend on the query: shared in the offline phase
        _owner_send(ep, keys, M, "W", w, 64)
        _owner_send(ep, keys, M, "b", b, 64)
    await_close(ep)
    return PartyResult(info={"role": M})


def _run_server(ep, role, keys, job, shape, cls, fair, shift: int) -> PartyResult:
    st = _server_offline(ep, role, keys, job, shape, cls, fair, shift, C)
    # preprocessing done: the client may send its query; sent from inside the online phase
    # (``rep3.session.online_phase``) so the online clock starts no later than the client's
    # work; P0's query-independent output message rides along (``direct.py``)
    extra = st["fast"].get("to_client", ()) if st.get("fast") else ()
    _server_online_phase(ep, st, lambda: ep.send(C, "astra/ready", np.ones(1, np.uint8), *extra))
    return PartyResult(info={"role": role})


def _server_offline(ep, role, keys, job, shape, cls, fair, shift: int, x_owner: str) -> dict:
    """A server's offline phase; ``x_owner``: whose keys mask the query (C; or "p0", i.e.
    k_01 / k_02, when the servers prepare ahead of the client, ``prepare``). Returns the
    state the online phase needs (with, on the precomputed semi-honest path, the arrays
    sent to the client ahead: ``st["fast"]["to_client"]``, ``direct.py``)."""
    eng = AstraEngine(ep, role, keys, job.security, 64, prg=job.prg.derive("astra-engine"),
                      bucket=job.options.get("bucket"), opened=job.options.get("opened"))
    beng = AstraEngine(ep, role, keys, job.security, 1, prg=job.prg.derive("astra-bool"))
    beng.out_h, beng.in_h = eng.out_h, eng.in_h     # one amortised verify for both rings
    batch, k = shape["X"]
    n = shape["b"][0]
    bx = pad = fprep = None
    direct = reveal_mode(job.options) == "direct"
    fast_path = fastpath.applies(job.security, direct)
    with ep.phase("offline"):
        X, _ = eng.share_offline(x_owner, shape["X"], "X")
        W, _ = eng.share_offline(M, shape["W"], "W")
        B, _ = eng.share_offline(M, shape["b"], "b")
        W = eng.share_online(M, W, "W")
        B = eng.share_online(M, B, "b")
        U, prep = eng.matmul_offline(X, W, C if receiver_checked(job, cls) else None)
        Y = U + B.map(lambda a: a[None, :])
        if cls:
            # class 1 iff trunc(Y) > 0 iff Y >= 2^shift iff A = 2^shift - 1 - Y < 0: msb(A)
            A = (-Y).add_public((1 << shift) - 1).map(lambda a: np.ascontiguousarray(a).reshape(-1))
            bx = fastpath.bitext_offline_direct(eng, batch * n) if fast_path else bitext_offline(eng, A, beng)
        if fair:
            from secinfer.protocols.astra.bitext import output_mask
            from secinfer.protocols.astra.fair import frec_offline
            oe = beng if cls else eng
            pad, _ = oe.share_offline(C, (batch * n,), "pad")
            omask = output_mask(eng, bx) if cls else \
                Y.map(lambda a: np.ascontiguousarray(a).reshape(-1))
            omask = AShare(oe.bits, None, omask.l1, omask.l2)
        rho = eng.parts_pad((batch * n,)) if direct and not eng.malicious and not cls else None
        # semi-honest direct: the online step's query-independent part, computed now
        fast = fastpath.server_prep(eng, X, U, B, prep, bx, cls, shift, rho, C) if fast_path else None
        if fast is not None:
            fastpath.expect_server(ep, fast, C)   # (frame templates built offline: issue #23)
        eng.finish_offline()
        if eng.malicious:
            eng.verify()
        if fair:
            # [ASTRA Fig. 10 offline]: commitments to lambda_{y,1}, lambda_{y,2} of the padded output
            fprep = frec_offline(oe, omask + pad, "out")
        gc.collect()   # garbage of the offline phase: collected now, not during the online one
    return {"fast": fast, "eng": eng, "beng": beng, "X": X, "W": W, "U": U, "B": B, "prep": prep, "bx": bx, "cls": cls,
            "shift": shift, "fair": fair, "fairprep": (pad, fprep) if fair else None, "direct": direct, "rho": rho,
            "warm": warm_online(job.options)}


def _server_online_phase(ep, st: dict, ready) -> None:
    """``ready()``: the last offline message to the client (it starts its query on it), sent
    from inside the online phase so the launcher's online window (from the last party's
    entry) cannot start after the client's query (``rep3.session.online_phase``)."""
    eng = st["eng"]
    if st.get("fast"):
        if fastpath.has_online(eng.role, st["cls"]):   # regression: P0's part went offline
            if st.get("warm"):
                with ep.phase("offline"):
                    fastpath.warm_server(st["fast"])   # option warm_online: a dry run, nothing sent
            with online_phase(ep, ready):
                fastpath.server_online(ep, st["fast"], C)
        else:
            with ep.phase("offline"):                  # (no online phase: not in the window)
                ready()
        await_close(ep)
        return
    with online_phase(ep, ready):
        X = eng.share_online(C, st["X"], "X")
        ep.mark("shared")      # the evaluators hold [[x]]: the servers' online work starts
        _server_online(ep, eng, st["beng"], X, st["W"], st["U"], st["B"], st["prep"], st["bx"], st["cls"],
                       st["shift"], st["fair"], st["fairprep"], st["direct"], st["rho"])
    await_close(ep)


def _server_online(ep, eng, beng, X, W, U, B, prep, bx, cls, shift, fair, fairprep, direct, rho) -> None:
    """A server's online steps after the query is shared (one of the reveal modes; the
    semi-honest direct one is ``direct.server_online``)."""
    if prep.check_at is not None:
        # receiver-checked product (docs/protocols/astra.md): the evaluators exchange their
        # m_z parts with the input check (sh-consistency) and send their components; P0
        # checks m*_x (P1 / P2's hash) and sends its component and H(m*_z) straight to the
        # client, who runs the mul-mz check: two server rounds on every path
        st = eng.products_send(X, W, U, prep, with_verify=True)   # the input check rides along
        U = eng.products_recv(st)
        Y = U + B.map(lambda a: a[None, :])
        eng.open_to(C, Y.map(lambda a: np.ascontiguousarray(a).reshape(-1)), "y", prep.mz_check)
        return
    m_cls_direct = cls and direct and eng.malicious and not fair
    # m* first when P0's answer (H(m*_z)) is on the longest path: the product is revealed
    # next, or (direct classification) P2 waits for it before y leaves
    U = eng.matmul_online(X, W, U, prep, mstar_first=not cls or m_cls_direct)
    Y = U + B.map(lambda a: a[None, :])
    pending = None
    if m_cls_direct:
        # the verify message travels while the comparison runs; it is checked before
        # anything is revealed (the comparison folds no hash); P0 tells P2 first, whose
        # y is the last step
        pending = eng.verify_start(peers=("p2", "p1", "p0"))
    if cls:
        # class 1 iff trunc(Y) > 0 iff Y >= 2^shift iff A = 2^shift - 1 - Y < 0: msb(A)
        A = (-Y).add_public((1 << shift) - 1).map(lambda a: np.ascontiguousarray(a).reshape(-1))
        if direct and not fair:
            # y and its label check go to the client from P2 (two rounds less with the overlap)
            st = bitext_online(eng, A, bx, beng, to=C, pending_verify=pending)
            eng.verify_finish(pending)
            open_direct_to(beng, C, st, "y")
            return
        out, out_eng = bitext_online(eng, A, bx, beng, pending_verify=pending), beng
    else:
        out, out_eng = Y.map(lambda a: np.ascontiguousarray(a).reshape(-1)), eng
    if fair:
        from secinfer.protocols.astra.fair import frec_online
        pad, fprep = fairprep
        pad = out_eng.share_online(C, pad, "pad")
        eng.verify()
        v = frec_online(out_eng, out + pad, fprep, "out")
        ep.send(C, "astra/fair/out", v)
        return
    if pending is not None:
        eng.verify_finish(pending)
    elif eng.malicious:
        eng.verify()
    out_eng.open_to(C, out, "y")


def _run_client(ep, keys, job, x, n, cls, fw, classes, fair, malicious, prepared=False) -> PartyResult:
    cfg = job.fixed
    batch = x.shape[0]
    bits = 1 if cls else 64
    size = batch * n
    fast = fastpath.applies(job.security, reveal_mode(job.options) == "direct")
    extra = None   # fast: P0's lambda_y / r, received with its "ready"
    with ep.phase("offline"):
        fastpath.check_query(x, fw[1], cfg)   # typed errors before any message of the query
        if fair:
            pad = job.prg.derive("astra-pad").ring((size,), bits)
            lam_pad = _owner_lambda(keys, C, "pad", (size,), bits)
        espec = fastpath.client_extra_spec(cls, size) if fast else None
        if prepared:
            lam_x, extra = _recv_query_mask(ep, x.shape, malicious, espec, fastpath.extra_sender(cls))
        else:
            lam_x = _owner_lambda(keys, C, "X", x.shape, 64)   # input-independent: offline
        gc.collect()
        if not prepared:
            for p in SERVERS:
                got = ep.recv(p, "astra/ready", _ACK, *((espec,) if fast and p == fastpath.extra_sender(cls) else ()))
                if len(got) > 1:
                    extra = got[1]
        if fast:
            extra = fastpath.client_extra(cls, size, extra)
            bufs = fastpath.encode_buffers(x.shape)
            ospec = fastpath.output_spec(cls, size)
            acc = fastpath.output_buffer(cls, size)
            small = fastpath.output_small(cls, size, extra)
            fastpath.expect_client(ep, cls, x.shape, size)
            if not lam_x.flags.writeable:   # (received: m_x is added into it online)
                lam_x = lam_x.copy()
            if warm_online(job.options) and cfg.ring.bits == 64:   # a dry run, nothing sent
                fastpath.warm_client(x, fw[1], bufs, cls, size, extra, acc, small)
    with online_phase(ep):
        ep.mark("query")       # the client starts sharing its query
        if fast and cfg.ring.bits == 64:
            m = fastpath.encode_masked(x, fw[1], lam_x, bufs)
            # (classification: P2 first, then P1, whose labels P0 takes first; the other order
            # measured no better: docs/protocols/astra.md, "Fifth pass"); both frames made
            # before the first leaves (``fastpath.send_query``, "Sixth pass")
            fastpath.send_query(ep, ("p2", "p1") if cls else ("p1", "p2"), m)
        else:
            _owner_send(ep, keys, C, "X", mdl.encode_input(x, fw[1], cfg), 64, lam_x)
        if fair:
            _owner_send(ep, keys, C, "pad", pad, bits, lam_pad)
            got = []
            for p in SERVERS:
                try:
                    got.append(ep.recv_one(p, "astra/fair/out", ArraySpec(np.uint64, (size,))))
                except Exception:  # noqa: BLE001 - a silent or aborting server casts no vote
                    ep._aborted = None
            v = _two_of_three(got)
            ep.require(v is not None, "fair-output", None, "fewer than two servers delivered the same output")
            val = (v - pad) if bits == 64 else (v ^ pad)
        elif fast:
            val = fastpath.receive_output(ep, cls, size, extra, ospec, acc, small)
        elif reveal_mode(job.options) == "direct" and cls:
            val = _receive_direct_m(ep, size)
        else:
            val = _receive_output(ep, size, malicious, bits, mz_check=receiver_checked(job, cls))
        ep.mark("output")      # reconstructed and checked: the client holds the output
    close(ep)
    ring = cfg.ring
    if cls:
        bit = (val & np.uint64(1)).astype(np.int64).reshape(batch, n)
        out = np.asarray(classes, np.float64)[bit]
        return PartyResult(output=out, output_ring=bit.astype(np.uint64), info={"classifier": True})
    # exact oracle truncation: from f_x + f_w fractional bits down to f
    v = ring.arshift(val.reshape(batch, n), fw[0] + fw[1] - cfg.frac_bits)
    return PartyResult(output=cfg.decode(v), output_ring=v, info={"classifier": False})


def _receive_direct_m(ep, size: int) -> np.ndarray:
    """Client side of the malicious classification reveal ``direct``: Pi_rec^m [ASTRA Fig. 6] of
    [[r1 xor r2]]^B (value + hash from the second holder, per component) and y from P2 with
    the check "bitext-y" [ASTRA 5.4]: H(L_y) from P2 must be P0's hash of the label of y."""
    spec, hs = packed_spec(1, (size,)), ArraySpec(np.uint8, (32,))
    t = "astra/out/y"
    got = dict(ep.recv_each({"p0": (t + "/l1", spec, hs, ArraySpec(np.uint8, (size, 2, 32))),
                             "p1": (t + "/m", spec, hs),
                             "p2": (t + "/l2", spec, hs, spec, ArraySpec(np.uint8, (size, 32)))}))
    (l1p, hl2, pair), (mp, hl1), (l2p, hm, yp, hy) = got["p0"], got["p1"], got["p2"]
    l1, m, l2, y = (unpack(v, 1, (size,)) for v in (l1p, mp, l2p, yp))
    for name, val, h in (("lambda_1", l1, hl1), ("lambda_2", l2, hl2), ("m", m, hm)):
        ep.require(np.array_equal(digest("out", val), h), "rec-consistency", None, f"{name} and its hash disagree")
    ep.require(np.array_equal(pair[np.arange(size), y.astype(np.int64)], hy), "bitext-y", "p2",
               "y does not match the output label")
    return (y ^ m ^ l1 ^ l2) & np.uint64(1)


# ---- offline material made ahead of the client (serving: ProtocolSpec.prepare) ----------------
# The servers' offline phase depends on the client only through the mask of its query,
# lambda_x, which the client's keys k_C1 (C, P0, P1) and k_C2 (C, P0, P2) draw. Prepared
# ahead, the servers draw it instead from k_01 and k_02 (the same holders among the
# servers, as for an input of P0 [ASTRA Fig. 1]); when the client comes, P0 sends it
# lambda_x (malicious: lambda_{x,1}, lambda_{x,2}, and P1 / P2 hashes of the component
# they hold, check "prep-mask": with one corrupt server each component has an honest
# holder, so a wrong lambda that would shift the client's input aborts). This message
# replaces the "ready" acknowledgement, so the client's rounds do not change. The model
# owner shares W and b in the prepared session (fresh masks for every prepared item).

class AstraPrep(Prep):
    """One party's prepared offline state for one session (see above)."""

    def __init__(self, role: str, rows: int, state: dict | None = None, hdr=None) -> None:
        self.role, self.rows, self.state, self.hdr = role, rows, state, hdr

    def wipe(self) -> None:
        self.state = self.hdr = None


def prep_refusal(security: str, options: dict) -> str:
    if security == "fair":
        return ("fair security: the client's output pad is shared and committed to in the offline phase "
                "[ASTRA Fig. 10], so that phase needs the client")
    if options.get("queries", 1) != 1:
        return "option queries > 1 (one prepared item is one query)"
    return ""


def prepare(role: str, ep, job: PartyJob) -> AstraPrep:
    """The offline phase of one future session among P0, P1, P2 and M (no client)."""
    refuse_unpreparable("astra", prep_refusal, job)
    if role not in SERVERS + (M,):
        raise ProtocolError(f"astra prepares on the servers and the model owner, not {role!r}")
    rows = prep_rows(job.options)
    reveal_mode(job.options)
    warm_online(job.options)
    try:
        with ep.phase("setup"):
            keys = setup_keys(ep, role, job.prg, job.security != "semi-honest")   # no client: no k_C1, k_C2
            lm, k, n, cls, fw, classes, _ = header(ep, role, job, to=SERVERS)
        if role == M:
            w, b = lm.encode(job.fixed)
            with ep.phase("offline"):
                _owner_send(ep, keys, M, "W", w, 64)
                _owner_send(ep, keys, M, "b", b, 64)
            return AstraPrep(role, rows, hdr=(lm.public_header(job.fixed), np.asarray(classes, np.float64)))
        shape = {"X": (rows, k), "W": (k, n), "b": (n,)}
        st = _server_offline(ep, role, keys, job, shape, cls, False, fw[0] + fw[1] - job.fixed.frac_bits, "p0")
        st.update(k=k, n=n)
        # the item must not keep the prep session's endpoint (``run_prepared`` gives the
        # engines the client session's): a closed endpoint can hold a transport error whose
        # traceback keeps this session's frames, job and PRG alive as long as the item
        st["eng"].ep = st["beng"].ep = None
        return AstraPrep(role, rows, st)
    except PeerAbortedError as e:
        ep.abort(e.check, e.suspect, e.detail)
        raise


def run_prepared(role: str, ep, job: PartyJob, prep: AstraPrep | None) -> PartyResult:
    """One client session on prepared material (``prepare``); the client passes None."""
    try:
        return _run_prepared(role, ep, job, prep)
    except PeerAbortedError as e:
        ep.abort(e.check, e.suspect, e.detail)
        raise
    finally:
        if prep is not None:
            prep.wipe()


def _send_query_shape(ep, job: PartyJob, k: int) -> np.ndarray:
    """The client's query as a (batch, k) array; its batch size goes to every server."""
    x = np.asarray(job.input, np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != k:
        raise ShapeError(f"query shape {x.shape} does not match the model's {k} features")
    for p in SERVERS:
        ep.send(p, "astra/batch", np.array([x.shape[0]], np.int64))
    return x


def _run_prepared(role: str, ep, job: PartyJob, prep) -> PartyResult:
    malicious = job.security != "semi-honest"
    if role == C:
        with ep.phase("setup"):
            _, k, n, cls, fw, classes, _ = header(ep, role, job)
            x = _send_query_shape(ep, job, k)
        return _run_client(ep, None, job, x, n, cls, fw, classes, False, malicious, prepared=True)
    if prep is None or prep.role != role or (prep.state is None and prep.hdr is None):
        raise ProtocolError(f"{role}: no prepared material for this session (or it was used already)")
    if role == M:
        with ep.phase("setup"):
            hdr, classes = prep.hdr
            ep.send(C, "astra/hdr", hdr, classes)
        await_close(ep)
        return PartyResult(info={"role": M})
    st = prep.state
    eng, beng = st["eng"], st["beng"]
    eng.ep = beng.ep = ep              # the prepared engines now talk over this session
    with ep.phase("setup"):
        batch = int(ep.recv_one(C, "astra/batch", ArraySpec(np.int64, (1,)))[0])
        if batch != prep.rows:
            raise ProtocolError(f"client asked for batch size {batch}; this material is for {prep.rows}")
    X = st["X"]
    extra = st["fast"].get("to_client", ()) if st.get("fast") else ()

    def ready() -> None:
        # lambda_x of the query, drawn by the servers ahead (see above), replaces "ready"
        if role == "p0":
            if malicious:
                ep.send(C, "astra/prep/lam", pack(X.l1, 64), pack(X.l2, 64))
            else:
                ep.send(C, "astra/prep/lam", pack(eng.R.add(X.l1, X.l2), 64), *extra)
        elif malicious:
            ep.send(C, "astra/prep/lam", digest("prep-mask", X.l1 if role == "p1" else X.l2))
        else:
            ep.send(C, "astra/ready", np.ones(1, np.uint8), *extra)
    _server_online_phase(ep, st, ready)
    return PartyResult(info={"role": role, "prepared": True})


def _recv_query_mask(ep, shape, malicious: bool, extra_spec=None, extra_from: str = "p0") -> tuple:
    """Client: lambda_x from P0 (the servers drew it ahead), checked against P1's and P2's
    hashes (malicious); and the array ``extra_spec`` describes, which ``extra_from`` sends
    with its message on the precomputed path (``direct.py``)."""
    spec, hs = packed_spec(64, shape), ArraySpec(np.uint8, (32,))
    if not malicious:
        req = {"p0": ["astra/prep/lam", spec], "p1": ["astra/ready", _ACK], "p2": ["astra/ready", _ACK]}
        if extra_spec is not None:
            req[extra_from].append(extra_spec)
        got = dict(ep.recv_each({p: tuple(r) for p, r in req.items()}))
        return unpack(got["p0"][0], 64, shape), (got[extra_from][-1] if extra_spec is not None else None)
    got = dict(ep.recv_each({"p0": ("astra/prep/lam", spec, spec), "p1": ("astra/prep/lam", hs),
                             "p2": ("astra/prep/lam", hs)}))
    l1, l2 = (unpack(a, 64, shape) for a in got["p0"])
    ep.require(np.array_equal(digest("prep-mask", l1), got["p1"][0])
               and np.array_equal(digest("prep-mask", l2), got["p2"][0]), "prep-mask", None,
               "P0's mask of the query and the other holders' hashes of it differ")
    return l1 + l2, None


REVEALS = ("direct", "paper")


def reveal_mode(options: dict) -> str:
    """``options["reveal"]``: ``direct`` (default) sends the client what it needs with the
    fewest server rounds (semi-honest: additive parts / the comparison's masked bit straight
    to the client; malicious classification: the verify message overlaps the comparison
    and P2 sends y with its output-label hash to the client, who checks it);
    ``paper`` keeps the message structure of [ASTRA Fig. 4, 6] (the evaluators reconstruct
    m first, verify after the comparison). Every party must get the same value."""
    r = options.get("reveal", "direct")
    if r not in REVEALS:
        raise ProtocolError(f"option reveal must be one of {REVEALS}, got {r!r}")
    return r


def warm_online(options: dict) -> bool:
    """``options["warm_online"]`` (default True): on the semi-honest direct path every party
    with an online step runs it once offline on all-zero scratch inputs right before its
    "ready" (``direct.warm_server`` / ``warm_client``): nothing is sent or drawn, the results
    are discarded, so the first call of each kind online finds numpy's dispatch set up. A
    party-local choice: messages, views and outputs are the same either way."""
    return bool_option(options, "warm_online")


def _two_of_three(got: list) -> np.ndarray | None:
    for i in range(len(got)):
        for j in range(i + 1, len(got)):
            if np.array_equal(got[i], got[j]):
                return got[i]
    return None


def _check_mz(ep, h0: bytes, h1: bytes, h2: bytes) -> None:
    """Receiver-checked product [ASTRA Fig. 8's check at the output's receiver]: P0's H(m*_z) (unmasked
    with P2's pad) must equal both evaluators' H(m_z - m_x m_y + delta_z). With one corrupt
    server at least two of the three are honest, so a wrong m_z (even one both evaluators
    hold) aborts, and so does a wrong m*_x from P1 (P0's pad then differs from P2's)."""
    ep.require(h0 == h1 == h2, "mul-mz", None,
               "H(m*_z) from P0 and the evaluators' hashes differ (a wrong m_z, or P0 got a wrong m*_x)")


# Pi_rec^m towards the client: (component name, sender, the server whose frame carries its hash)
_OUT_PARTS = (("lambda_1", "p0", "p1"), ("lambda_2", "p2", "p0"), ("m", "p1", "p2"))


def _receive_output(ep, size: int, malicious: bool, bits: int, mz_check: bool = False) -> np.ndarray:
    """Client side of Pi_rec (malicious: Pi_rec^m [ASTRA Fig. 6] towards C; ``mz_check``: each
    frame also carries the client-checked product hash).

    Each frame is unpacked and its component hashed as it arrives; the comparisons (plain
    byte strings) wait for all three, in a fixed order, so the check that fails first does
    not depend on the arrival order. Little is left after the last frame: on this kind of
    machine every numpy call made right after a wake-up costs tens of microseconds."""
    spec, t = packed_spec(bits, (size,)), "astra/out/y"
    hs = ArraySpec(np.uint8, (32,))
    # one frame per server: its component (+ the hash of the next one's), taken as it arrives
    extra = ((hs,) if malicious else ()) + ((hs,) if mz_check else ())
    pad = (hs,) if mz_check else ()    # P2: the pad of P0's masked H(m*_z)
    val, own, carried, mz = {}, {}, {}, {}
    for p, a in ep.recv_each({"p0": (t + "/l1", spec, *extra), "p1": (t + "/m", spec, *extra),
                              "p2": (t + "/l2", spec, *extra, *pad)}):
        val[p] = unpack(a[0], bits, (size,))
        if malicious:
            own[p] = digest_bytes("out", val[p])
            carried[p] = a[1].tobytes()
        if mz_check:
            mz[p] = a[2] if p != "p2" else (a[2], a[3])
    if mz_check:
        h2, pad2 = mz["p2"]
        _check_mz(ep, np.bitwise_xor(mz["p0"], pad2).tobytes(), mz["p1"].tobytes(), h2.tobytes())
    if malicious:
        for name, sender, holder in _OUT_PARTS:
            ep.require(own[sender] == carried[holder], "rec-consistency", None, f"{name} and its hash disagree")
    v = val["p1"] - val["p0"] - val["p2"]
    return v if bits == 64 else v & np.uint64(1)


def check_model(graph, security: str) -> None:
    mdl.check_model(graph, security)


_M, _F = ("malicious", "fair"), ("fair",)
SPEC = ProtocolSpec(
    name="astra",
    description="ASTRA 3-server prediction over Z_2^64 (linear/logistic regression, linear SVM)",
    roles=ROLES,
    model_role=M,
    input_role=C,
    securities=("semi-honest", "malicious", "fair"),
    default_security="semi-honest",
    run_party=run_party,
    check_model=check_model, reveals=mdl.reveals, value_limits=mdl.value_limits,
    default_fixed="fx64f13",
    paper="astra-3pc-rings.txt",
    prepare=prepare, run_prepared=run_prepared, prep_refusal=prep_refusal,
    checks=tuple(Check(n, what, "ASTRA " + ref, sec) for n, what, ref, sec in (
        ("key-setup", "the receivers of a three-holder PRF key got the same key", "2.2", _M),
        ("sh-consistency", "P1 and P2 got the same m_x from an outside owner (Pi_sh^m)", "4.2", _M),
        ("rec-consistency", "a reconstructed component equals its hash from the second holder", "Fig. 6", _M),
        ("coin-toss", "a coin-toss opening matches its commitment", "App. A.1", _M),
        ("trip-cut", "the opened triples of Pi_trip are multiplication triples", "Fig. 16", _M),
        ("trip-bucket", "bucket sacrifice of Pi_trip: each kept triple against the others", "Fig. 16", _M),
        ("prc", "Pi_prc: the products' triples (a, b, c) against Pi_trip's", "Fig. 7", _M),
        ("mul-mz", "P0's H(m*_z) equals the evaluators' H(m_z - m_x m_y + delta_z)", "Fig. 8", _M),
        ("mul-mstar", "m*_x, m*_y from P1 equal P2's hash of them", "Fig. 8", _M),
        ("gc-consistency", "the garbled circuits from P0 and P1 are the same", "5.4", _M),
        ("gc-key", "an opened input label matches its commitment", "5.4", _M),
        ("bitext-share", "m of the comparison's masks r1, r2 agrees with P0's hash", "5.4", _M),
        ("bitext-y", "y from P2 matches the hash of its output label", "5.4", _M),
        ("frec-commit", "the two commitments of a common share agree", "Fig. 10", _F),
        ("frec-commit-m", "P1 and P2 committed to the same m_y", "Fig. 10", _F),
        ("frec-abort", "P0 signalled abort with a valid proof of origin", "Fig. 10", _F),
        ("frec-open", "an opening matched the agreed commitment", "Fig. 10", _F),
        ("fair-output", "two servers delivered the same masked output", "4.3", _F),
        ("prep-mask", "prepared ahead (serving): P0's mask of the query equals P1's / P2's hash of it",
         "Fig. 1 (Pi_sh, mask drawn by the servers)", _M))),
)
