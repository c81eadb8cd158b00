"""``falcon``: the Falcon+ baseline of [STAMP 5.1] -- the same three parties, roles,
replicated sharing over Z_2^32 and linear layers as ``stamp``, with every non-linear
layer computed in pure MPC (``mpc.py``, ``backend.py``) and no trusted device.

Roles as in ``stamp``: p0 holds the model, p1 the input and gets the output, p2 computes.
Security: semi-honest and malicious (security with abort, honest majority). Comparisons
(ReLU, MaxPool, softmax's max, Pow) use Falcon's wrap and private compare over Z_p
(``compare.py``) with Falcon's round structure (default ``falcon_drelu="falcon"``: beta
products online, Falcon's select; ``"pc"``: the same compare with both preprocessed;
``"carry"``: a bit-sliced carry chain instead), whose preprocessing the parties make in
the offline phase. Malicious: every product (Z_2^l, Z_p, AND) is
verified with a triple, and every truncation uses a pair (r, r >> f); all are generated
by the three parties in the offline phase (``triples.py``, ``compare.py``), no dealer.
"""

from __future__ import annotations

import time

from secinfer.errors import ProtocolError
from secinfer.protocols.base import Check, PartyJob, PartyResult, ProtocolSpec
from secinfer.protocols.falcon.backend import FalconBackend
from secinfer.protocols.falcon import compare
from secinfer.protocols.falcon.mpc import DEFAULT_DRELU, DRELU_MODES, FalconMPC
from secinfer.protocols.falcon.triples import plan_requests
from secinfer.protocols.rep3 import executor
from secinfer.protocols.rep3.blas import one_blas_thread
from secinfer.protocols.rep3.engine import Engine
from secinfer.protocols.rep3.graph import (CLIENT, NAMES, exchange_model, input_phase, online_together, share_input,
                                           share_model_and_input)
from secinfer.sharing import replicated as rss

SUPPORTED = {"Relu", "MaxPool", "GlobalMaxPool", "AveragePool", "GlobalAveragePool", "BatchNormalization",
             "LayerNormalization", "Softmax", "Conv", "Gemm", "MatMul", "Mul", "Add", "Sub", "Neg"}


def run_party(role: str, ep, job: PartyJob) -> PartyResult:
    with one_blas_thread():
        return _run_party(role, ep, job)


def _run_party(role: str, ep, job: PartyJob) -> PartyResult:
    if role not in NAMES:
        raise ProtocolError(f"falcon has no role {role!r}; roles are {NAMES}")
    me = NAMES.index(role)
    with ep.phase("setup"):
        eng = Engine(ep, NAMES, me, job.fixed, job.security == "malicious", job.prg)
        eng.setup_keys()
        graph, batch = exchange_model(ep, me, job)
    drelu = job.options.get("falcon_drelu", DEFAULT_DRELU)
    if drelu not in DRELU_MODES:
        raise ProtocolError(f"falcon_drelu must be one of {DRELU_MODES}, not {drelu!r}")
    mpc = FalconMPC(eng, job.fixed, drelu=drelu)
    max_mode = job.options.get("falcon_max", "sequential")
    if max_mode not in ("sequential", "tree"):
        raise ProtocolError(f"falcon_max must be 'sequential' or 'tree', not {max_mode!r}")
    bk = {"sequential_max": max_mode == "sequential", "max_index": bool(job.options.get("falcon_max_index", True)),
          "bn": job.options.get("falcon_bn", "falcon")}
    if bk["bn"] not in ("falcon", "folded"):
        raise ProtocolError(f"falcon_bn must be 'falcon' or 'folded', not {bk['bn']!r}")
    backend = FalconBackend(mpc, **bk)
    env = share_model_and_input(eng, graph, job)
    if eng.malicious or drelu != "carry":
        # offline: every comparison's preprocessing (and, malicious, every triple and
        # truncation pair) of the online run, made by the parties
        with ep.phase("offline"):
            info_in = graph.inputs[0]
            dry_env = dict(env)
            dry_env[info_in.name] = rss.zeros(tuple(info_in.shape))
            reqs, truncs, pcs, sels = plan_requests(FalconMPC, {"drelu": drelu}, eng, job.fixed, FalconBackend,
                                                    bk, graph, dry_env, executor.run_graph)
            if eng.malicious:
                mpc.trunc_pairs.prepare(truncs)
                mpc.triples.prepare(reqs)
            if sum(pcs) + sum(sels) <= compare.PC_UPFRONT_MAX:
                mpc.pc.prepare(pcs, sels)
            # else (memory): each comparison's preprocessing is made just before it, in the
            # offline phase of the meters, its CPU time excluded from the online time below
    early = input_phase(job.options) == "offline"
    if early:
        with ep.phase("offline"):
            share_input(eng, graph, job, env)
    with online_together(eng.ep, me):   # the three enter the online phase together (rep3.graph)
        cpu0, jit0 = time.thread_time(), mpc.pc.stats["pc_just_in_time_cpu_s"]
        if not early:
            share_input(eng, graph, job, env)
        env = executor.run_graph(eng.ring, me, backend, graph, env, mark=ep.mark)
        mpc.flush()
        y = eng.reveal_to(CLIENT, env[graph.output_names[0]])
        cpu = time.thread_time() - cpu0 - (mpc.pc.stats["pc_just_in_time_cpu_s"] - jit0)
    if mpc.triples.queue or mpc.trunc_pairs.queue or mpc.pc.left():
        raise ProtocolError("Falcon+ prepared more triples, truncation pairs or comparison material than the "
                            "online run used")
    info = {"batch": batch, "security": job.security, "falcon_drelu": drelu, **mpc.stats, **backend.counts,
            **mpc.triples.stats, **mpc.trunc_pairs.stats, **mpc.pc.stats, "online_cpu_s": cpu,
            "meter": ep.meter.summary()}
    if me == CLIENT:
        return PartyResult(output=job.fixed.decode(y), output_ring=y, info=info)
    return PartyResult(info=info)


def check_model(graph, security: str) -> None:
    if security not in ("semi-honest", "malicious"):
        raise ProtocolError(f"falcon offers semi-honest and malicious, not {security!r}")
    from secinfer.ir.movement import MOVEMENT
    executor.check_graph(graph, SUPPORTED | set(MOVEMENT), "falcon")


SPEC = ProtocolSpec(
    name="falcon",
    description="Falcon+ baseline: 3-party replicated sharing, pure-MPC non-linear layers (no trusted device)",
    roles=NAMES,
    model_role=NAMES[0],
    input_role=NAMES[CLIENT],
    securities=("semi-honest", "malicious"),
    default_security="semi-honest",
    run_party=run_party,
    check_model=check_model,
    default_fixed="fx32f13",
    paper="stamp-tee-assisted-3pc.txt (baseline of 5.1)",
    run_warning=("WARNING: falcon is an in-repo COST MODEL of Falcon+ (the baseline of STAMP's evaluation): "
                 "its probabilistic truncation makes outputs differ from the reference and from run to run "
                 "(in fx32, by many units); use it for timing and traffic, not for answers"),
    baseline_for="stamp",
    checks=(
        Check("reconstruct-consistency", "a missing component equals its hash from the other holder", "ABY3 5.1"),
        Check("malformed-share", "a Z_p share received is below p", "Falcon Alg. 1"),
        Check("multiplication-check", "every product matches its verification triple", "Falcon 3, ABY3 5.3"),
        Check("triple-cut", "the opened verification triples are product triples", "ABY3 5.3"),
        Check("triple-sacrifice", "bucket sacrifice: each kept triple against the others", "ABY3 5.3"),
    ),
)
