"""``aby3``: the ABY3 baseline for ASTRA's prediction functions [ASTRA 6.1.2], same roles,
same model handling and the same client-side exact truncation as ``astra``, so the two run
side by side on identical inputs. Securities: semi-honest and malicious (with abort).

setup    PRF keys (shared with astra's key setup), public header, batch size.
offline  M replicated-shares W and b; malicious: triples for every product of the dot
         products (and every AND of the bit extraction) by cut-and-choose.
online   C shares its query; dot product (semi-honest: 3 elements per output; malicious:
         9 per product); classifiers: bit extraction on boolean shares (log-round PPA);
         malicious: sacrifice + hash checks; reconstruction towards C.
"""

from __future__ import annotations

import gc

import numpy as np

from secinfer.errors import PeerAbortedError, ProtocolError, ShapeError
from secinfer.net.channel import ArraySpec
from secinfer.crypto.gc.circuit import msb_add3_circuit
from secinfer.protocols.aby3.engine import Rep3Engine, owner_send
from secinfer.protocols.base import Check, PartyJob, PartyResult, ProtocolSpec
from secinfer.protocols.rep3 import linear as mdl
from secinfer.protocols.rep3.blas import one_blas_thread
from secinfer.protocols.rep3.digest import digest
from secinfer.protocols.rep3.keys import setup_keys
from secinfer.protocols.rep3.session import await_close, close, header, online_phase, repeat_queries
from secinfer.protocols.rep3.wire import packed_spec, unpack
from secinfer.sharing import replicated as rss

SERVERS = ("p0", "p1", "p2")
M, C = "model_owner", "client"
ROLES = SERVERS + (M, C)


def run_party(role: str, ep, job: PartyJob) -> PartyResult:
    try:
        with one_blas_thread():
            return repeat_queries(role, ep, job, _run)
    except PeerAbortedError as e:
        ep.abort(e.check, e.suspect, e.detail)
        raise


def _run(role, ep, job):
    if role not in ROLES:
        raise ProtocolError(f"aby3 has no role {role!r}")
    if job.security not in SPEC.securities:
        raise ProtocolError(f"aby3 security must be one of {SPEC.securities}")
    malicious = job.security == "malicious"
    cfg = job.fixed
    with ep.phase("setup"):
        keys = setup_keys(ep, role, job.prg, malicious)
        lm, k, n, cls, fw, classes, _ = header(ep, role, job)
        if role == C:
            x = np.asarray(job.input, np.float64)
            x = x[None, :] if x.ndim == 1 else x
            if x.ndim != 2 or x.shape[1] != k:
                raise ShapeError(f"query shape {x.shape} does not match the model's {k} features")
            for p in SERVERS:
                ep.send(p, "rep3/batch", np.array([x.shape[0]], np.int64))
        elif role in SERVERS:
            batch = int(ep.recv_one(C, "rep3/batch", ArraySpec(np.int64, (1,)))[0])
            if not 1 <= batch <= 1 << 20:
                raise ProtocolError(f"client asked for batch size {batch}")
    if role == M:
        w, b = lm.encode(cfg)
        with ep.phase("offline"):
            owner_send(ep, keys, M, "W", w)
            owner_send(ep, keys, M, "b", b)
        await_close(ep)
        return PartyResult(info={"role": M})
    if role == C:
        fw_, fx = fw
        with ep.phase("offline"):
            gc.collect()
            for p in SERVERS:
                ep.recv_one(p, "rep3/ready", ArraySpec(np.uint8, (1,)))
        with online_phase(ep):
            ep.mark("query")
            owner_send(ep, keys, C, "X", mdl.encode_input(x, fx, cfg))
            size = x.shape[0] * n
            obits = 1 if cls else 64
            spec, hs = packed_spec(obits, (size,)), ArraySpec(np.uint8, (32,))
            comps, hashes = [], []
            for p in SERVERS:
                comps.append(unpack(ep.recv_one(p, "rep3/out/y", spec), obits, (size,)))
                if malicious:
                    hashes.append(ep.recv_one(p, "rep3/out/y/h", hs))
            if malicious:
                for i in range(3):
                    ep.require(np.array_equal(digest("out", comps[i]), hashes[(i + 2) % 3]), "rec-consistency", None,
                               "output component and hash disagree")
            v = comps[0] + comps[1] + comps[2]
            ep.mark("output")
        close(ep)
        if cls:
            bit = (v & np.uint64(1)).astype(np.int64).reshape(-1, n)
            return PartyResult(output=np.asarray(classes, np.float64)[bit], output_ring=bit.astype(np.uint64))
        r = cfg.ring.arshift(v.reshape(-1, n), fw_ + fx - cfg.frac_bits)
        return PartyResult(output=cfg.decode(r), output_ring=r)
    eng = Rep3Engine(ep, role, keys, job.security, 64, prg=job.prg.derive("rep3"),
                     bucket=job.options.get("bucket"), opened=job.options.get("opened"))
    beng = Rep3Engine(ep, role, keys, job.security, 1, prg=job.prg.derive("rep3-bool"),
                      bucket=job.options.get("bucket"), opened=job.options.get("opened"))
    beng.out_h, beng.in_h = eng.out_h, eng.in_h
    with ep.phase("offline"):
        W = eng.input(M, (k, n), "W")
        B = eng.input(M, (n,), "b")
        if malicious:
            eng.preprocess(batch * k * n)
            if cls:
                beng.preprocess(batch * n * msb_add3_circuit(64).and_count)
            eng.verify()
        if cls:   # the bit extraction's circuit and its AND levels: built now, not online (~10 ms)
            msb_add3_circuit(64).levels()
        gc.collect()   # offline garbage collected now, not during the online phase
    # "ready" to the client from inside the online phase (metered offline: rep3.session)
    with online_phase(ep, lambda: ep.send(C, "rep3/ready", np.ones(1, np.uint8))):
        X = eng.input(C, (batch, k), "X")
        ep.mark("shared")
        Y = eng.matmul(X, W)
        Y = rss.add(eng.R, Y, rss.apply(B, lambda a: np.broadcast_to(a[None, :], (batch, n))))
        Y = rss.apply(Y, lambda a: np.ascontiguousarray(a).reshape(-1))
        if cls:
            shift = fw[0] + fw[1] - cfg.frac_bits
            a = rss.add_public(eng.R, eng.idx, rss.neg(eng.R, Y), np.uint64((1 << shift) - 1))
            out, oeng = eng.bitext(a, beng), beng
        else:
            out, oeng = Y, eng
        if malicious:
            eng.verify()
            beng.verify()
        oeng.open_to(C, out, "y")
    await_close(ep)
    return PartyResult(info={"role": role})


def check_model(graph, security: str) -> None:
    mdl.check_model(graph, security)


SPEC = ProtocolSpec(
    name="aby3",
    description="ABY3 replicated 3PC baseline for ASTRA's prediction functions",
    roles=ROLES, model_role=M, input_role=C,
    securities=("semi-honest", "malicious"), default_security="semi-honest",
    run_party=run_party, check_model=check_model, reveals=mdl.reveals, value_limits=mdl.value_limits,
    default_fixed="fx64f13",
    paper="astra-3pc-rings.txt (baseline, ref. 55)",
    baseline_for="astra",
    checks=(
        Check("key-setup", "the two receivers of a three-holder PRF key got the same key", "ASTRA 2.2"),
        Check("sh-consistency", "P1 and P2 received the same input component", "ABY3 5.1"),
        Check("rec-consistency", "a missing component equals its hash from the other holder", "ABY3 5.1"),
        Check("coin-toss", "a coin-toss opening matches its commitment", "ASTRA App. A.1"),
        Check("trip-cut", "the opened triples are multiplication triples", "ASTRA App. A.1"),
        Check("trip-bucket", "bucket sacrifice: each kept triple against the others", "ASTRA App. A.1"),
        Check("sacrifice", "every product verified with a preprocessed triple", "ABY3 5.3"),
    ),
)
