"""``stamp``: three-party inference with a lightweight trusted device (LTEE) per party.

[STAMP] Huang, Hoang, Li, Shi, Suh: "STAMP: Lightweight TEE-Assisted MPC for Efficient
Privacy-Preserving Machine Learning". Three parties P_1, P_2, P_3 with 2-out-of-3
replicated sharing over Z_2^32 (13 fractional bits) [3.1-3.2]; linear layers in MPC,
non-linear layers offloaded to each party's LTEE [4.2-4.5]; honest majority,
semi-honest or malicious with abort [2.2].

Roles: ``p0`` (P_1) holds the model and shares its weights; ``p1`` (P_2) holds the input
and is the only party that learns the output; ``p2`` (P_3) is the third computing
party. All three run an LTEE -- here an EMULATION, one OS process per party
(``ltee_device``), see docs/protocols/stamp.md.

Phases: setup = LTEE initialization [Protocol 1] + host PRF keys + architecture and
batch size; offline = the model owner shares its weights; online = input sharing, the
network, and the output opened to ``p1`` only -- when the graph ends in a product (with
only movement ops after it), in the same step as that product's truncation, by p1's LTEE
(``StampBackend.product_output``; option ``stamp_fuse_output=False`` opens it separately).
"""

from __future__ import annotations

import time

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.ir.fixed_ops import encode_weights
from secinfer.ir.graph import Graph
from secinfer.net.channel import ArraySpec
from secinfer.protocols.base import PartyJob, PartyResult, ProtocolSpec
from secinfer.protocols.stamp import executor
from secinfer.protocols.stamp.backend import StampBackend
from secinfer.protocols.stamp.engine import Engine
from secinfer.protocols.stamp.ltee import LteeLink, initialize
from secinfer.protocols.stamp.nonlinear import StampOps

NAMES = ("p0", "p1", "p2")
MODEL, CLIENT = 0, 1
_MAX_ARCH = 1 << 24


def exchange_model(ep, me: int, job: PartyJob) -> tuple[Graph, int]:
    """Setup: the model owner publishes the architecture, the client the batch size."""
    if me == MODEL:
        if job.model is None:
            raise ProtocolError("the model owner (p0) needs a model")
        arch = np.frombuffer(job.model.public_bytes(), dtype=np.uint8)
        for p in (1, 2):
            ep.send(NAMES[p], "setup/arch", arch)
    else:
        (arch,) = ep.recv(NAMES[MODEL], "setup/arch", ArraySpec(np.uint8, (None,), max_elems=_MAX_ARCH))
    public = Graph.from_public_bytes(bytes(arch))
    if me == CLIENT:
        if job.input is None:
            raise ProtocolError("the input party (p1) needs an input")
        job.input = public.batch_input(job.input)  # one sample without a batch axis is a batch of one
        batch = int(job.input.shape[0])
        for p in (0, 2):
            ep.send(NAMES[p], "setup/batch", np.array([batch], dtype=np.int64))
    else:
        (b,) = ep.recv(NAMES[CLIENT], "setup/batch", ArraySpec(np.int64, (1,)))
        batch = int(b[0])
    if not 1 <= batch <= 1 << 16:
        raise ProtocolError(f"batch size {batch} out of range")
    g = (job.model if me == MODEL else public).with_batch(batch)
    return g, batch


def share_model_and_input(eng: Engine, graph: Graph, job: PartyJob) -> dict:
    """Offline: weights from p0; online: the input from p1 (``input`` switches phase)."""
    me = eng.me
    env = {}
    weights = encode_weights(graph, eng.cfg) if me == MODEL else {}
    with eng.ep.phase("offline"):
        for name in sorted(graph.weight_info):
            shape = tuple(graph.weight_info[name].shape)
            env[name] = eng.input(MODEL, weights.get(name), shape)
    return env


def input_phase(options: dict) -> str:
    """``options["input_phase"]``: ``online`` (default) shares the client's input in the
    online phase; ``offline`` before it -- the accounting of the paper's measurements,
    whose parties start from shares of the input (benchmarks only: the input must then be
    known before the online phase starts). Both protocols (STAMP, Falcon+) honour it."""
    ph = options.get("input_phase", "online")
    if ph not in ("online", "offline"):
        raise ProtocolError(f"option input_phase must be 'online' or 'offline', got {ph!r}")
    return ph


def share_input(eng: Engine, graph: Graph, job: PartyJob, env: dict, backend: StampBackend | None = None) -> None:
    """Malicious STAMP, when the input feeds products only: shared through the first
    product's verification mask (``StampBackend.masked_input``); else the replicated
    input sharing (``Engine.input``; Falcon+ calls this without a backend)."""
    info = graph.inputs[0]
    shape = tuple(info.shape)
    x = None
    if eng.me == CLIENT:
        x = np.asarray(job.input, dtype=np.float64)
        graph.check_input(info.name, x)
        x = eng.cfg.encode(x)
    products = backend.can_mask_input(graph, info.name) if backend is not None else 0
    if products:
        env[info.name] = backend.masked_input(CLIENT, x, shape, info.name, products)
    else:
        env[info.name] = eng.input(CLIENT, x, shape)


def run_party(role: str, ep, job: PartyJob) -> PartyResult:
    if role not in NAMES:
        raise ProtocolError(f"stamp has no role {role!r}; roles are {NAMES}")
    if job.fixed.ring_bits != 32 and not job.options.get("allow_ring64"):
        raise ProtocolError("STAMP runs over Z_2^32 (fx32f13) [STAMP 3.1]")
    me = NAMES.index(role)
    malicious = job.security == "malicious"
    link = LteeLink(role)
    try:
        with ep.phase("setup"):
            initialize(ep, NAMES, me, link, job.options, job.fixed.ring_bits, job.fixed.frac_bits,
                       output_party=CLIENT, malicious=malicious)
            eng = Engine(ep, NAMES, me, job.fixed, malicious, job.prg)
            eng.setup_keys()
            graph, batch = exchange_model(ep, me, job)
        ops = StampOps(eng, link)
        # the last product fused with the opening to p1 (option stamp_fuse_output, default on)
        fuse = bool(job.options.get("stamp_fuse_output", True))
        # malicious: products of activations shared as A + rho re-share f(A, W) early
        # (option stamp_premultiply, default on; docs/protocols/stamp.md)
        backend = StampBackend(eng, ops, output_receiver=CLIENT if fuse else None,
                               premultiply=bool(job.options.get("stamp_premultiply", True)))
        env = share_model_and_input(eng, graph, job)
        if malicious:   # sigma = W - B of every weight's verification operand, once [docs: stamp.md]
            with ep.phase("offline"):
                backend.prepare(graph, env)
        early = input_phase(job.options) == "offline"
        if early:
            with ep.phase("offline"):
                share_input(eng, graph, job, env, backend)
        stats0 = link.refresh_stats().copy()
        tstats0, tbus0 = ops.triple_stats.copy(), ops.triple_bus
        with ep.phase("online"):
            bus0, tx0 = link.meter.total, link.meter.transactions
            cpu0 = time.thread_time()
            if not early:
                share_input(eng, graph, job, env, backend)
            env = executor.run_graph(eng.ring, me, backend, graph, env)
            out = env[graph.output_names[0]]
            if isinstance(out, executor.Opened):   # opened in the last product's step
                y = out.value
            else:
                y = eng.reveal_to(CLIENT, out)
            cpu = time.thread_time() - cpu0
            online_bus = link.meter.total - bus0 - (ops.triple_bus - tbus0)
            online_tx = link.meter.transactions - tx0
        stats = link.refresh_stats() - stats0 - (ops.triple_stats - tstats0)
        info = {"bus": {"to_device": link.meter.to_device, "from_device": link.meter.from_device,
                        "online_bytes": online_bus, "online_transactions": online_tx,
                        "preprocessing_bytes": ops.triple_bus, "by_kind": link.meter.by_kind},
                "device_ops": {"int_ops": int(stats[0]), "float_ops": int(stats[1]), "exp_ops": int(stats[2]),
                               "aes_bytes": int(stats[3]), "emulation_busy_s": float(stats[4]) / 1e9},
                "device_preprocessing_ops": {"int_ops": int(ops.triple_stats[0]),
                                             "aes_bytes": int(ops.triple_stats[3])},
                "online_cpu_s": cpu, "meter": ep.meter.summary(),
                "batch": batch, "security": job.security, "ltee": "emulation",
                "mult_checks": eng.stats["mult_checks"], **backend.counts}
        if me == CLIENT:
            return PartyResult(output=job.fixed.decode(y), output_ring=y, info=info)
        return PartyResult(info=info)
    finally:
        link.close()


def check_model(graph, security: str) -> None:
    if security not in ("semi-honest", "malicious"):
        raise ProtocolError(f"stamp offers semi-honest and malicious (with abort) security, not {security!r}")
    executor.check_graph(graph, executor.supported_ops(), "stamp")


SPEC = ProtocolSpec(
    name="stamp",
    description="STAMP: 3-party replicated sharing with a lightweight trusted device (LTEE, emulated) per party",
    roles=NAMES,
    model_role=NAMES[MODEL],
    input_role=NAMES[CLIENT],
    securities=("semi-honest", "malicious"),
    default_security="semi-honest",
    run_party=run_party,
    check_model=check_model,
    default_fixed="fx32f13",
    paper="stamp-tee-assisted-3pc.txt",
    trust="TRUSTED: each party's LTEE (trusted device) is EMULATED in software (a separate process, not hardware), certified by the well-known DEMO CA key (public: insecure by design; -o ltee_ca_seed=HEX sets your own) [STAMP 2.2]",
)
