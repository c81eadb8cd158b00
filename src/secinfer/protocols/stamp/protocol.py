"""``stamp``: three-party inference with a lightweight trusted device (LTEE) per party.

[STAMP] Huang, Hoang, Li, Shi, Suh: "STAMP: Lightweight TEE-Assisted MPC for Efficient
Privacy-Preserving Machine Learning". Three parties P_1, P_2, P_3 with 2-out-of-3
replicated sharing over Z_2^32 (13 fractional bits) [STAMP 3.1-3.2]; linear layers in MPC,
non-linear layers offloaded to each party's LTEE [STAMP 4.2-4.5]; honest majority,
semi-honest or malicious with abort [STAMP 2.2].

Roles: ``p0`` (P_1) holds the model and shares its weights; ``p1`` (P_2) holds the input
and is the only party that learns the output; ``p2`` (P_3) is the third computing
party. All three run an LTEE -- here an EMULATION, one OS process per party
(``ltee_device``), see docs/protocols/stamp.md.

Phases: setup = LTEE initialization [STAMP Protocol 1] + host PRF keys + architecture and
batch size; offline = the model owner shares its weights (semi-honest: the LTEEs serve the
online phase's seed requests ahead, ``StampBackend.prefetch``, the first layer's
input-independent part is computed, ``input_offline``, and the masked components that
depend on offline data only are sent, ``StampOps.ahead``), ending when all three are ready
(``rep3.graph.online_together``: each party's "ready" sent from inside its online phase,
metered offline); online = input sharing, the
network, and the output opened to ``p1`` only -- when the graph ends in a product (with
only movement ops after it), in the same step as that product's truncation, by p1's LTEE
(``StampBackend.product_output``; option ``stamp_fuse_output=False`` opens it separately).
"""

from __future__ import annotations

import time

import numpy as np

from secinfer.errors import FixedPointRangeError, PeerAbortedError, ProtocolError
from secinfer.protocols.base import Check, PartyJob, PartyResult, ProtocolSpec, bool_option
from secinfer.protocols.rep3 import executor
from secinfer.protocols.rep3.blas import one_blas_thread
from secinfer.protocols.rep3.engine import Engine
from secinfer.protocols.rep3.graph import (CLIENT, MODEL, NAMES, exchange_model, expect_ready, input_phase,
                                           online_together, share_input, share_model_and_input)
from secinfer.protocols.stamp.backend import StampBackend
from secinfer.protocols.stamp.ltee import initialize
from secinfer.protocols.stamp.ltee_inproc import open_link
from secinfer.protocols.stamp.nonlinear import RANGE_GUARD, StampOps
from secinfer.protocols.stamp.online_plan import compile_plan


def run_party(role: str, ep, job: PartyJob) -> PartyResult:
    with one_blas_thread():
        return _run_party(role, ep, job)


def _run_party(role: str, ep, job: PartyJob) -> PartyResult:
    if role not in NAMES:
        raise ProtocolError(f"stamp has no role {role!r}; roles are {NAMES}")
    if job.fixed.ring_bits != 32 and not job.options.get("allow_ring64"):
        raise ProtocolError("STAMP runs over Z_2^32 (fx32f13) [STAMP 3.1]")
    me = NAMES.index(role)
    malicious = job.security == "malicious"
    link = open_link(role, job.options)   # option stamp_ltee: "process" (default) | "inprocess"
    try:
        with ep.phase("setup"):
            initialize(ep, NAMES, me, link, job.options, job.fixed.ring_bits, job.fixed.frac_bits,
                       output_party=CLIENT, malicious=malicious)
            eng = Engine(ep, NAMES, me, job.fixed, malicious, job.prg)
            eng.setup_keys()
            graph, batch = exchange_model(ep, me, job)
            guard = exchange_range_guard(ep, me, graph, job) if job.options.get("range_guard") else None
        ops = StampOps(eng, link)
        # the last product fused with the opening to p1 (option stamp_fuse_output, default on)
        fuse = bool(job.options.get("stamp_fuse_output", True))
        # malicious: products of activations shared as A + rho re-share f(A, W) early
        # (option stamp_premultiply, default on; docs/protocols/stamp.md)
        early = input_phase(job.options) == "offline"
        # semi-honest, input shared online: the client's message goes to p0 (``Engine.input``:
        # its owner sends to owner + 2), so the first unsplit device operation is led by p2
        # and evaluated by p0 -- p1's and p2's masked components then travel in the same
        # round as the input, not one round after p0 got it; each next operation is
        # evaluated by the party that received the last one's result last (the rotation)
        first = (CLIENT + 1) % 3 if not malicious and not early else 0
        # semi-honest: a device step whose result only products with a weight take is evaluated
        # by the model owner's LTEE, which keeps the real component (option stamp_owner_split,
        # default on; ``StampBackend._plan_held``)
        held = job.options.get("stamp_owner_split", True)
        if held not in (True, False, "all"):
            raise ProtocolError(f"option stamp_owner_split is true, false or \"all\", not {held!r}")
        owner = MODEL if not malicious and held else None
        backend = StampBackend(eng, ops, output_receiver=CLIENT if fuse else None,
                               premultiply=bool(job.options.get("stamp_premultiply", True)), first_leader=first,
                               owner=owner)
        backend.hold_batches = held == "all"
        # semi-honest: the components that depend on offline data only leave before the online
        # phase (option stamp_send_ahead, default on; with stamp_prefetch; ``StampOps.ahead``)
        backend.send_ahead = not malicious and bool(job.options.get("stamp_send_ahead", True))
        # the online device requests' operation specs go to the LTEE with the prefetch, parsed
        # and validated there before the query (option stamp_ship_specs, default on; ``cmd_specs``)
        ops.ship_specs = bool(job.options.get("stamp_ship_specs", True))
        warm_online(job.options)   # (a bad value refused before any offline work)
        plan_on = online_plan_on(job.options)   # (read once; a bad value refused here)
        if guard is not None:
            backend.set_range_guard(guard)
        env = share_model_and_input(eng, graph, job)
        with ep.phase("offline"):
            if malicious:   # sigma = W - B of every weight's verification operand, once [docs: stamp.md]
                backend.prepare(graph, env)
            else:           # the weights' part of the local products, once (``rep3.stacked``)
                backend.precompute(graph, env)
            plan = None
            if early:
                share_input(eng, graph, job, env, backend)
            elif not malicious and job.options.get("stamp_input_offline", True):
                # the input's pseudo-random components and the first layer's input-independent
                # half, before the query [docs: stamp.md, "Input-independent first layer"]
                plan = backend.prepare_input(graph, CLIENT)
            if not malicious and job.options.get("stamp_prefetch", True):
                # every seed request of the online phase served by the LTEE now, and the masks
                # expanded: they depend on the model, batch and schedule only [docs: stamp.md]
                backend.prefetch(graph, env)
            expect_ready(ep, me)   # (the "ready" frames of ``online_together``, templated now)
            link.ready()   # the device's start-up work is done before the online phase
            stats0 = link.refresh_stats().copy()
            tstats0, tbus0 = ops.triple_stats.copy(), ops.triple_bus
            fast = None
            if plan is not None and warm_online(job.options) and backend.send_ahead:
                # the online steps once on scratch inputs, right before the "ready": nothing
                # sent, asked of the device or taken (option stamp_warm_online; ``StampBackend.warm``)
                if plan_on:   # traced, and compiled into a flat plan (``online_plan``)
                    backend.trace, ops.trace = [], []
                backend.warm(graph, env, _client_input(eng, graph, None) if me == CLIENT else None)
                fast = compile_plan(backend, graph, env) if plan_on else None
        # the three enter together; the engine's endpoint: hashes expected first are compared
        with online_together(eng.ep, me):
            link.set_online(True)    # the bus busy-polls in the online phase (``stamp_bus_spin_us``)
            bus0, tx0 = link.meter.total, link.meter.transactions
            cpu0 = time.thread_time()
            x = _client_input(eng, graph, job) if plan is not None and me == CLIENT else None
            planned = fast is not None and fast.ready(x)
            if planned:              # the steps compiled offline (``online_plan``), same messages
                y = fast.run(x, mark=ep.mark)
            else:
                if plan is not None:
                    env[plan.name] = plan.share(x)
                elif not early:
                    share_input(eng, graph, job, env, backend)
                env = executor.run_graph(eng.ring, me, backend, graph, env, mark=ep.mark)
                out = env[graph.output_names[0]]
                if isinstance(out, executor.Opened):   # opened in the last product's step
                    y = out.value
                else:
                    y = eng.reveal_to(CLIENT, out)
            if guard is not None:
                _guarded_end(ep, me)
            cpu = time.thread_time() - cpu0
            online_bus = link.meter.total - bus0 - (ops.triple_bus - tbus0)
            online_tx = link.meter.transactions - tx0
            link.set_online(False)
        stats = link.refresh_stats() - stats0 - (ops.triple_stats - tstats0)
        info = {"bus": {"to_device": link.meter.to_device, "from_device": link.meter.from_device,
                        "online_bytes": online_bus, "online_transactions": online_tx,
                        "preprocessing_bytes": ops.triple_bus, "by_kind": link.meter.by_kind,
                        # the host's busy-polls for answers: ended with bytes / ran out (online only)
                        "spin_hits": link.spin_hits, "spin_misses": link.spin_misses},
                "device_ops": {"int_ops": int(stats[0]), "float_ops": int(stats[1]), "exp_ops": int(stats[2]),
                               "aes_bytes": int(stats[3]), "emulation_busy_s": float(stats[4]) / 1e9},
                "device_preprocessing_ops": {"int_ops": int(ops.triple_stats[0]),
                                             "aes_bytes": int(ops.triple_stats[3])},
                "online_cpu_s": cpu, "meter": ep.meter.summary(),
                "batch": batch, "security": job.security, "ltee": "emulation", "ltee_mode": link.mode,
                "mult_checks": eng.stats["mult_checks"],
                # masks expanded before the query that the online phase did not take (0 when
                # the dry runs foresaw every request, ``StampOps.prefetch``)
                "expanded_unused": len(ops._expanded), "warmed": backend.warmed,
                "planned": planned, "plan_why": backend.plan_why, **backend.counts}
        if me == CLIENT:
            return PartyResult(output=job.fixed.decode(y), output_ring=y, info=info)
        return PartyResult(info=info)
    except PeerAbortedError as e:   # a peer's LTEE refused a sum that left the ring: the same typed error here
        if f"'{RANGE_GUARD}'" not in (e.detail or ""):
            raise
        detail = e.detail.split("failed: ", 1)[-1]
        ep.abort(RANGE_GUARD, None, detail)    # passed on: a party waiting on us hears it too
        raise FixedPointRangeError(f"{detail} (reported by {e.suspect})") from None
    finally:
        link.close()


def _client_input(eng, graph, job: PartyJob | None):
    """The client's input, checked against the graph and encoded (as ``rep3.graph.share_input``);
    ``job`` None: an all-zero input of the graph's shape, the scratch input of ``StampBackend.warm``."""
    info = graph.inputs[0]
    x = np.asarray(job.input if job is not None else np.zeros(tuple(int(d) for d in info.shape)), dtype=np.float64)
    graph.check_input(info.name, x)
    return encode_input(eng.cfg, x)


def encode_input(cfg, x: np.ndarray) -> np.ndarray:
    """``cfg.encode(x)`` of a float64 array, bit for bit, in fewer passes (issue #23: the client's
    encoding is on the batch-1 critical path): one range test (``|x|.max() < max_abs`` is false
    for a NaN or an infinity too), then x * 2^f + 0.5 floored in place, and the int64 result
    reduced in place. Anything else -- a value out of range, a two-limb ring, an empty array
    -- goes to ``cfg.encode``, which raises its own error for the first."""
    if cfg.ring.limbs != 1 or x.size == 0 or x.dtype != np.float64 or not float(np.abs(x).max()) < cfg.max_abs:
        return cfg.encode(x)
    v = np.multiply(x, cfg.scale)
    v += 0.5
    np.floor(v, out=v)
    u = v.astype(np.int64).view(np.uint64)
    return np.bitwise_and(u, cfg.ring.mask, out=u)


def warm_online(options: dict) -> bool:
    """``options["stamp_warm_online"]`` (default True): semi-honest, with the prefetch and the
    components sent ahead, each party runs its online steps once on scratch inputs right before
    its "ready" (``StampBackend.warm``: nothing sent, asked of the device or taken). A party-local
    choice; a value other than true or false is a ``ProtocolError``."""
    return bool_option(options, "stamp_warm_online")


def online_plan_on(options: dict) -> bool:
    """``options["stamp_online_plan"]`` (default True): with the warm run, each party compiles
    its online steps into a flat plan offline (``online_plan``) and walks it online when the
    live state is the one it was compiled for. A party-local choice; true or false only."""
    return bool_option(options, "stamp_online_plan")


def _guarded_end(ep, me: int) -> None:
    """A guarded session ends together: p1 (the output party) tells p0 and p2 it has its
    output, so a guard trip in p1's or p2's LTEE reaches p0 (whose LTEE runs no check, and
    whose part may be over by then) as the typed abort, not as a completed session."""
    import numpy as np

    from secinfer.net.channel import ArraySpec

    if me == CLIENT:
        for p in range(3):
            if p != me:
                ep.send(NAMES[p], "online/guard-done", np.ones(1, dtype=np.uint8))
    else:
        ep.recv(NAMES[CLIENT], "online/guard-done", ArraySpec(np.uint8, (1,)))


def exchange_range_guard(ep, me: int, graph, job: PartyJob) -> dict:
    """Setup, with option ``range_guard`` (a served query outside the model owner's
    certificate; docs/protocols/stamp.md "Range guard"): the model owner computes the
    guard's plan from its weights (``range_cert.shadow_plan``: the shadow shift s and one
    public bound per guarded layer) and sends it to p1 and p2, whose LTEEs may run the checks."""
    import json

    import numpy as np

    from secinfer.net.channel import ArraySpec

    if me == MODEL:
        from secinfer.ir.range_cert import shadow_plan

        plan, why = shadow_plan(graph, job.fixed)
        raw = json.dumps({"plan": plan, "why": why}, sort_keys=True).encode()
        for p in (1, 2):
            ep.send(NAMES[p], "setup/range-guard", np.frombuffer(raw, dtype=np.uint8))
    else:
        (arr,) = ep.recv(NAMES[MODEL], "setup/range-guard", ArraySpec(np.uint8, (None,), max_elems=1 << 20))
        try:
            msg = json.loads(bytes(arr).decode())
            plan, why = msg["plan"], str(msg["why"])[:300]
            if plan is not None:
                plan = {"s": int(plan["s"]), "check": {str(k): int(v) for k, v in plan["check"].items()},
                        "make": {str(k): int(v) for k, v in plan["make"].items()}}
                if not 1 <= plan["s"] <= 24 or any(not 0 <= v < 1 << 62 for d in ("check", "make")
                                                    for v in plan[d].values()):
                    raise ValueError("bounds")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ProtocolError(f"the model owner's range-guard plan is malformed ({e})") from None
    if plan is None:
        raise FixedPointRangeError(f"the range guard does not cover this model ({why}); the query was refused")
    return plan


def check_model(graph, security: str) -> None:
    if security not in ("semi-honest", "malicious"):
        raise ProtocolError(f"stamp offers semi-honest and malicious (with abort) security, not {security!r}")
    executor.check_graph(graph, executor.supported_ops(), "stamp")


_M, _A = ("malicious",), ("semi-honest", "malicious")
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
    range_guard=True,
    checks=tuple(Check(n, what, "STAMP " + ref, sec) for n, what, ref, sec in (
        ("reconstruct-consistency", "a missing component equals its copy or hash from the other holder", "App. A", _M),
        ("multiplication-check", "every product matches its verification triple (deltas are zero)", "3.2", _M),
        ("input-consistency", "the input owner sent the same rho = X - A to both parties", "3.2", _M),
        ("relu-step2", "the two copies of the masked value sent towards the LTEE agree", "Protocol 4", _M),
        ("softmax-step2", "the two copies of the masked exponent inputs agree", "Protocol 6", _M),
        ("relu-step5", "the two LTEE evaluations' results and padded shares agree", "Protocol 4", _M),
        ("output-consistency", "the output step's masked component equals its hash", "Protocol 5", _M),
        ("ltee-seed", "the LTEE released every seed of a zero-sharing", "Protocol 3", _M),
        ("ltee-certificate", "a peer's LTEE carries a valid manufacturer certificate", "Protocol 1", _M),
        ("ltee-key-exchange", "the LTEE accepted the peer's signed key exchange and wrapped key", "Protocol 1", _A),
        ("ltee-policy", "the LTEE releases only the masks its party may hold", "Protocol 2", _M),
        ("ltee-stale-counter", "the LTEE serves each counter range once (no replay)", "Protocol 2", _A),
        ("ltee-output-mac", "the output step's inputs carry the two other LTEEs' MACs", "Protocol 5", _M))),
    trust="TRUSTED: each party's LTEE (trusted device) is EMULATED in software (its own process, or with -o stamp_ltee=inprocess its host's process; not hardware), certified by the well-known DEMO CA key (public: insecure by design; -o ltee_ca_seed=HEX sets your own) [STAMP 2.2]",
)
