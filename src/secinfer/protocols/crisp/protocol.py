"""``crisp``: two-party inference secure against a malicious client [CRISP, Fang et al.].

Roles: ``server`` (P0, model, semi-honest), ``client`` (P1, input, may deviate
arbitrarily), ``dealer`` (the trusted offline dealer realising F_FSS [CRISP III-B, Fig. 3], its
own process). Securities: ``malicious`` (the paper's semi-honest server + malicious client:
MACs in the lifted ring Z_2^(n+s), s = 40, one final consistency check) and
``semi-honest`` (the baseline: same FSS gates and linear layers, no MACs, no check).

Message flow (Pi_Inf [CRISP Fig. 4]):

  setup    client -> server  crisp/batch                      batch size
           server -> client, dealer  crisp/plan               public architecture (JSON)
  offline  server -> dealer  crisp/mu                         fresh MAC key (malicious)
           dealer -> server, client  crisp/in-mask, crisp/key/i/j   [CRISP Fig. 3]
  online   client -> server  crisp/input     x - r_in  (InitLin: shares of x, mu x)
           per linear step i: Pi_Lin messages of the engine, then the ARS gate round
           per ReLU step:     one gate round (x + r opened, n bits each way)
           server -> client  crisp/check-seed   r_j, r'_j of step 4 (as a PRG seed)
           client -> server  crisp/q            <q>_1
           server: abort unless q = 0 mod 2^(n+s); else  server -> client  crisp/out
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from secinfer.arith.ring import Ring
from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError, ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.crypto.preprocessing import ArrayItem
from secinfer.errors import PreprocessingReuseError
from secinfer.protocols.base import Check, PartyJob, PartyResult, Prep, ProtocolSpec, prep_rows, refuse_unpreparable
from secinfer.protocols.crisp import lifted, linops, nonlinear
from secinfer.protocols.crisp.ckks_engine import input_layers
from secinfer.protocols.crisp.linear import make_engine
from secinfer.protocols.crisp.offline import (
    CLIENT, DEALER, SERVER, HeldClientHalf, Params, PartyStore, load_ahead, receive_preprocessing,
    run_dealer, store_path, take_in_mask, wipe,
)
from secinfer.protocols.crisp.plan import PARSE, avgpool_multipliers, check_graph, compile_plan
from secinfer.protocols.twopc import session
from secinfer.protocols.twopc.plan import encode_public, parse_plan

STAT_BITS = 40          # s of the lifted ring Z_2^(n+s) [CRISP V-B, Cramer et al.]
DEFAULT_ENGINE = "ckks"
CONSISTENCY = "crisp-consistency"
_OFFLINE_WAIT = 3600.0


def _params(job: PartyJob) -> Params:
    if job.security not in ("malicious", "semi-honest"):
        raise ConfigError(f"crisp offers security 'malicious' or 'semi-honest', not {job.security!r}")
    s = int(job.options.get("stat_bits", STAT_BITS))
    return Params(job.fixed.ring_bits, job.fixed.frac_bits, job.security == "malicious", s)


def _engine(job: PartyJob, prm: Params):
    name = job.options.get("linear", DEFAULT_ENGINE)
    return make_engine(name, Ring(prm.k), prm.f, prm.malicious, job.options)


# ---- server ------------------------------------------------------------------------------
def _run_server(ep, job: PartyJob, prep=None) -> PartyResult:
    prm = _params(job)
    engine = _engine(job, prm)
    try:
        return _serve(ep, job, prm, engine, prep)
    finally:
        engine.release()


def _serve(ep, job: PartyJob, prm: Params, engine, prep=None) -> PartyResult:
    g = Ring(prm.k)
    prg = job.prg.derive("crisp-server")
    with ep.phase("setup"):
        plan = compile_plan(job.model, job.fixed, session.recv_batch(ep, "crisp"))
        if prep is not None:
            prep.check_plan(plan.steps)
        session.send_plan(ep, "crisp", plan.steps, peers=(CLIENT, DEALER))
        steps = plan.steps
        engine.setup_server(ep, prg.derive("he-setup"))
    ahead = job.options.get("preprocessing_dir")
    with ep.phase("offline"):
        mu = None
        if prep is not None or ahead:
            # the dealer ran ahead of time (serving: in a prep session with this server,
            # which drew mu there; on disk: the dealer drew mu), fresh per item / store
            store = prep.take_store() if prep is not None else load_ahead(store_path(ahead, SERVER), prm, steps, 0)
            if prm.malicious:
                mu = store.take("mu", "arrays").arrays["mu"]
        else:
            store = PartyStore(SERVER)
            if prm.malicious:
                mu = g.random(prg.derive("mac-key"), ())      # fresh per inference [CRISP Fig. 4 step 1]
                ep.send(DEALER, "crisp/mu", mu)
        # the server's own input-independent HE work, masks and weight plaintexts, runs in
        # a worker thread while the dealer's keys are received
        off_s = {}
        with session.offline_worker() as pool:
            he_job = pool.submit(session.timed, engine.prepare_server, steps, plan.weights,
                                 prg.derive("he-offline"))
            if not ahead and prep is None:
                t_off = time.perf_counter()
                receive_preprocessing(ep, prm, steps, 0, store)
                off_s["receive_keys"] = time.perf_counter() - t_off
        he_offline, off_s["he_prepare"] = he_job.result()
        ep.send(CLIENT, "crisp/ready", np.zeros(1, np.uint8))     # offline work done
        # the HE part of every linear layer on the input runs now: the client's share there
        # is the dealer's r_in (``_on_input``)
        t_off = time.perf_counter()
        early = {i: engine.server_masks(ep, i, st, plan.weights[i].w, prg.derive(f"lin{i}"))
                 for i, st in _on_input(engine, steps)}
        off_s["he_input_layers"] = time.perf_counter() - t_off
    checks: list = []
    timing = {"linear": 0.0, "nonlinear": 0.0}
    with ep.phase("online"):
        _server_goes_online(ep)
        n_in = int(np.prod(steps[0].out_shape))
        (xhat,) = ep.recv(CLIENT, "crisp/input", ArraySpec(np.uint64, (n_in, g.limbs)))
        lifted.check_reduced(g, xhat, "server <- client input")
        re = xhat.reshape(tuple(steps[0].out_shape) + (g.limbs,))
        im = None
        if prm.malicious:   # InitLin: <mu x>_0 = mu (x - r) + <mu r>_0
            im = g.add(g.mul(re, mu), take_in_mask(store)["mu_r"].reshape(re.shape))

        def run_step(i, st, x):
            ep.mark(f"layer {i}/{len(steps) - 2} {st.op}")   # live progress of `secinfer run`
            t0 = time.perf_counter()
            if st.op != "lin":
                out = _local_or_gate(ep, CLIENT, prm, store, i, st, x, checks, job)
                timing["nonlinear"] += time.perf_counter() - t0
                return out
            kw = {"masks": early.pop(i)} if i in early else {}
            s_re, s_im, t = engine.server(ep, i, st, plan.weights[i], *x, mu, prg.derive(f"lin{i}"), **kw)
            if t is not None:
                checks.append(t)
            t1 = time.perf_counter()
            timing["linear"] += t1 - t0
            out = nonlinear.truncate(ep, CLIENT, prm, store, i, s_re, s_im, checks)
            timing["nonlinear"] += time.perf_counter() - t1
            return out

        y_re, _ = session.walk(steps, {steps[0].out: (re, im)}, run_step)
        t0 = time.perf_counter()
        if prm.malicious:
            seed = prg.derive("check").seed()
            ep.send(CLIENT, "crisp/check-seed", np.frombuffer(seed, np.uint8))
            q0 = _fold_checks(g, checks, seed)
            (q1,) = ep.recv(CLIENT, "crisp/q", ArraySpec(np.uint64, (g.limbs,)))
            lifted.check_reduced(g, q1[None], "server <- client q")
            ok = not np.any(g.add(q0, q1) != 0)
            if not ok:
                wipe(store)
            ep.require(ok, CONSISTENCY, CLIENT, "MAC check q != 0 mod 2^(n+s)")   # [CRISP Fig. 4 step 4]
        ep.send(CLIENT, "crisp/out", y_re.reshape(-1, g.limbs))
        timing["check_and_output"] = time.perf_counter() - t0
    wipe(store)
    info = _info(engine, prm, checks, timing)
    info["offline_seconds"] = off_s
    info.update(he_offline)
    return PartyResult(info=info)


def _server_goes_online(ep) -> None:
    """The server's last offline message: a one-byte word to the client, sent once the
    server is inside the online phase (metered offline: its byte and round stay there),
    where it only waits for the client's input. The client waits for it as its own last
    offline step, so it enters the online phase after the server. The online latency
    runs from the last party's entry (``runtime.launcher``); without this word the
    server, which still had offline work after sending its last answer, entered after
    the client in 3 of 5 semi-honest batch-128 runs (by up to 5.0 ms) and 2 of 5 at
    batch 1 (measured 2026-11-27), and the client had then sent its input and its first
    masked gate share before the measured window opened. Sent before the server's entry
    (or as a mutual ready), a server descheduled between the two could still enter after
    the client (seen: up to 6 ms with the mutual ready). Nothing online changes."""
    with ep.phase("offline"):
        ep.send(CLIENT, "crisp/go", np.ones(1, np.uint8))


def _wait_for_server(ep) -> None:
    """The client's last offline step: wait for the server's word (``_server_goes_online``)."""
    ep.recv(SERVER, "crisp/go", ArraySpec(np.uint8, (1,)), timeout=_OFFLINE_WAIT)


def _info(engine, prm: Params, checks, timing=None) -> dict:
    info = {"online_seconds": timing or {}, "linear_engine": engine.name, "insecure": bool(engine.insecure),
            "ring_bits": prm.n, "share_ring_bits": prm.k, "checked_vectors": len(checks),
            "dealer": "trusted offline dealer (F_FSS) [CRISP III-B]"}
    if engine.missing:
        info["missing"] = engine.missing
    if engine.timing:
        info["proof_seconds"] = dict(engine.timing)
    return info


def _fold_checks(g: Ring, checks: list, seed: bytes) -> np.ndarray:
    """q_b = sum_j < d_j, r_j > with r_j from the shared seed [CRISP Fig. 4 step 4]."""
    root = PRG(seed, "crisp-check")
    q = g.zeros(())
    for j, d in enumerate(checks):
        r = g.random(root.derive(f"r{j}"), d.shape[:-1])
        q = g.add(q, lifted.inner_product(g, d, r))
    return q


def _local_or_gate(ep, peer, prm, store, i, st, x, checks, job):
    """A non-``lin`` step on this party's (share, MAC share) ``x``."""
    g = Ring(prm.k)
    re, im = x
    if st.op == "move":
        return linops.move(st, re), (linops.move(st, im) if im is not None else None)
    if st.op == "relu":
        return nonlinear.relu(ep, peer, prm, store, i, re, im, checks)
    if st.op == "avgpool":
        mult = avgpool_multipliers(st, job.fixed)
        a_re = linops.avgpool_linear(st, mult, g, re)
        a_im = linops.avgpool_linear(st, mult, g, im) if im is not None else None
        return nonlinear.truncate(ep, peer, prm, store, i, a_re, a_im, checks)
    if st.op == "maxpool":
        w_re = linops.maxpool_windows(st, re)
        w_im = linops.maxpool_windows(st, im) if im is not None else None
        return nonlinear.maxpool_tree(ep, peer, prm, store, i, w_re, w_im, checks)
    raise ProtocolError(f"crisp: unexpected step {st.op!r}")


# ---- client ------------------------------------------------------------------------------
def _on_input(engine, steps) -> list:
    """(index, step) of the linear layers applied to the input itself, when the engine can
    run them offline (``offline_input_layers``). There the client's share is the dealer's
    input mask r_in (and <mu r_in>_1), known before the input: Pi_Lin's HE part needs only
    the client's share (the server's share enters in the clear, ``CKKSLinear.server``), so
    it runs in the offline phase, message for message as it would online. A client that
    deviates there adds errors exactly as it could online (caught by the check, "Soundness
    of the check"); the answers it reads are masked and flooded as online."""
    if not getattr(engine, "offline_input_layers", False):
        return []
    return input_layers(steps)


def _run_client(ep, job: PartyJob) -> PartyResult:
    prm = _params(job)
    engine = _engine(job, prm)
    try:
        return _client(ep, job, prm, engine)
    finally:
        engine.release()     # what the offline phase made and the online phase did not use


def _client(ep, job: PartyJob, prm: Params, engine) -> PartyResult:
    g = Ring(prm.k)
    cfg = job.fixed
    x = np.asarray(job.input, dtype=np.float64)
    with ep.phase("setup"):
        session.send_batch(ep, "crisp", x)
        steps = session.recv_plan(ep, "crisp", **PARSE)
        x = session.fit_input(x, steps, "crisp")
        engine.setup_client(ep, job.prg.derive("crisp-client-he"))
    ahead = job.options.get("preprocessing_dir")
    off_s: dict = {}
    with ep.phase("offline"):
        # proof commitments (witness-independent) in a worker thread while the dealer's
        # keys are received
        with session.offline_worker() as pool:
            pre_job = pool.submit(session.timed, engine.prepare_client, steps)
            if ahead:
                store = load_ahead(store_path(ahead, CLIENT), prm, steps, 1)
            else:
                store = PartyStore(CLIENT)
                t_off = time.perf_counter()
                receive_preprocessing(ep, prm, steps, 1, store)
                off_s["receive_keys"] = time.perf_counter() - t_off
        off_s["proof_commitments"] = pre_job.result()[1]
        # the server prepares its HE masks offline; wait for it (can take minutes)
        ep.recv(SERVER, "crisp/ready", ArraySpec(np.uint8, (1,)), timeout=_OFFLINE_WAIT)
        shp = x.shape + (g.limbs,)
        mask = take_in_mask(store)
        r_in = mask["r"].reshape(shp)
        start = (r_in, mask["mu_r"].reshape(shp) if prm.malicious else None)
        t_off = time.perf_counter()
        early = {i: engine.client(ep, i, st, *start) for i, st in _on_input(engine, steps)}
        off_s["he_input_layers"] = time.perf_counter() - t_off
        _wait_for_server(ep)
    checks: list = []
    with ep.phase("online"):
        xl = lifted.lift_signed(g, cfg.encode(x), prm.n)
        ep.send(SERVER, "crisp/input", g.sub(xl, r_in).reshape(-1, g.limbs))

        def run_step(i, st, v):
            ep.mark(f"layer {i}/{len(steps) - 2} {st.op}")
            if st.op != "lin":
                return _local_or_gate(ep, SERVER, prm, store, i, st, v, checks, job)
            s_re, s_im, t = early.pop(i) if i in early else engine.client(ep, i, st, *v)
            if t is not None:
                checks.append(t)
            return nonlinear.truncate(ep, SERVER, prm, store, i, s_re, s_im, checks)

        y1, _ = session.walk(steps, {steps[0].out: start}, run_step)
        if prm.malicious:
            (seed,) = ep.recv(SERVER, "crisp/check-seed", ArraySpec(np.uint8, (16,)))
            ep.send(SERVER, "crisp/q", _fold_checks(g, checks, bytes(seed)))
        out_shape = tuple(steps[-1].in_shape)
        (y0,) = ep.recv(SERVER, "crisp/out", ArraySpec(np.uint64, (int(np.prod(out_shape)), g.limbs)))
        lifted.check_reduced(g, y0, "client <- server output")
        y = lifted.low_bits(g, g.add(y0, y1.reshape(-1, g.limbs)), prm.n).reshape(out_shape)
    wipe(store)
    return PartyResult(output=cfg.decode(y), output_ring=y,
                       info={**_info(engine, prm, checks), "offline_seconds": off_s})


# ---- dealer ------------------------------------------------------------------------------
def _run_dealer(ep, job: PartyJob) -> PartyResult:
    prm = _params(job)
    with ep.phase("setup"):
        steps = session.recv_plan(ep, "crisp", **PARSE)
    if job.options.get("preprocessing_dir"):
        return PartyResult(info={"ran_ahead": True})     # its output is already in the stores
    with ep.phase("offline"):
        info = run_dealer(ep, prm, steps, job.prg.derive("crisp-dealer"))
    return PartyResult(info=info)


# ---- the dealer's output made ahead of the client (serving: ProtocolSpec.prepare) ---------
# What the dealer produces does not depend on the client [CRISP Fig. 3]: r_in, the shares
# of mu r_in and the FSS key pairs depend only on the public plan (the model's
# architecture at one batch size) and on the server's MAC key mu. So the server and the
# dealer make them ahead in a prep session of their own: the server sends the plan and a
# fresh mu (malicious), the dealer sends the server's half at once and keeps the client's
# half (``HeldClientHalf``). In the client's session the dealer sends that half, message
# for message as it would have made it then, so the client runs unchanged; the server's
# HE work (under the client's per-session key) stays in the session. One item is one
# session: the server's store and the dealer's held half are consumed by it and wiped.

class CrispPrep(Prep):
    """The server's store (mu, its mask shares, its key halves) or the dealer's held client
    half, for one future session at ``rows`` inputs of the plan ``plan`` (public bytes)."""

    def __init__(self, role: str, rows: int, plan: bytes, store=None, held=None) -> None:
        self.role, self.rows, self.plan, self._store, self._held = role, rows, plan, store, held

    def check_plan(self, steps: list) -> None:
        if encode_public(steps).tobytes() != self.plan:
            raise ProtocolError(f"crisp {self.role}: this session's plan is not the one the material was made for")

    def take_store(self):
        store, self._store = self._store, None
        if store is None:
            raise PreprocessingReuseError(f"crisp {self.role}: prepared material used already")
        return store

    def take_held(self):
        held, self._held = self._held, None
        if held is None:
            raise PreprocessingReuseError(f"crisp {self.role}: prepared material used already")
        return held

    def used(self) -> bool:
        return self._store is None and self._held is None

    def wipe(self) -> None:
        store, held, self._store, self._held = self._store, self._held, None, None
        if store is not None:
            wipe(store)
        if held is not None:
            held.wipe()


def prep_refusal(security: str, options: dict) -> str:
    if options.get("preprocessing_dir"):
        return "option preprocessing_dir (the dealer's output comes from files made ahead)"
    return ""


def prepare(role: str, ep, job: PartyJob) -> CrispPrep:
    """The dealer's output for one future session, made by the server and the dealer."""
    refuse_unpreparable("crisp", prep_refusal, job)
    prm, rows = _params(job), prep_rows(job.options)
    if role == SERVER:
        g = Ring(prm.k)
        prg = job.prg.derive("crisp-server-prep")
        with ep.phase("setup"):
            steps = compile_plan(job.model, job.fixed, rows).steps
            session.send_plan(ep, "crisp", steps, peers=(DEALER,))
        store = PartyStore(SERVER)
        with ep.phase("offline"):
            if prm.malicious:
                mu = g.random(prg.derive("mac-key"), ())      # fresh per item [CRISP Fig. 4 step 1]
                ep.send(DEALER, "crisp/mu", mu)
                store.put("mu", ArrayItem({"mu": mu}))
            receive_preprocessing(ep, prm, steps, 0, store)
        return CrispPrep(SERVER, rows, encode_public(steps).tobytes(), store=store)
    if role == DEALER:
        with ep.phase("setup"):
            steps = session.recv_plan(ep, "crisp", **PARSE)
        held = HeldClientHalf()
        with ep.phase("offline"):
            run_dealer(ep, prm, steps, job.prg.derive("crisp-dealer"), to_client=held)
        return CrispPrep(DEALER, rows, encode_public(steps).tobytes(), held=held)
    raise ProtocolError(f"crisp prepares on the server and the dealer, not {role!r}")


def run_prepared(role: str, ep, job: PartyJob, prep: CrispPrep | None) -> PartyResult:
    """One client session on material ``prepare`` made; the client passes None and runs
    exactly as in ``run_party``."""
    try:
        with _blas_one_thread():
            if role == CLIENT:
                return _run_client(ep, job)
            if prep is None or prep.role != role or prep.used():
                raise ProtocolError(f"crisp {role}: no prepared material for this session (or it was used already)")
            if role == SERVER:
                return _run_server(ep, job, prep)
            if role == DEALER:
                with ep.phase("setup"):
                    steps = session.recv_plan(ep, "crisp", **PARSE)
                    prep.check_plan(steps)
                with ep.phase("offline"):
                    prep.take_held().send(ep)
                return PartyResult(info={"prepared": True})
            raise ProtocolError(f"crisp has no role {role!r}")
    finally:
        if prep is not None:
            prep.wipe()


def produce_preprocessing_ahead(graph, fixed, batch: int, security: str, out_dir: str, prg,
                                stat_bits: int = STAT_BITS) -> dict:
    """Run the trusted dealer ahead of time for ``batch`` inputs of ``graph``'s architecture:
    writes crisp-server.npz and crisp-client.npz into ``out_dir`` (use them with the
    option ``preprocessing_dir``; each file is deleted when loaded)."""
    from secinfer.protocols.crisp.offline import produce_ahead

    prm = Params(fixed.ring_bits, fixed.frac_bits, security == "malicious", stat_bits)
    steps = parse_plan(encode_public(compile_plan(graph, fixed, batch).steps), "crisp", **PARSE)
    return produce_ahead(steps, prm, prg, store_path(out_dir, SERVER), store_path(out_dir, CLIENT))


def run_party(role: str, ep, job: PartyJob) -> PartyResult:
    runner = {SERVER: _run_server, CLIENT: _run_client, DEALER: _run_dealer}.get(role)
    if runner is None:
        raise ProtocolError(f"crisp has no role {role!r}")
    with _blas_one_thread():
        return runner(ep, job)


@contextlib.contextmanager
def _blas_one_thread():
    """BLAS on one thread for the session (restored after). The parties' matrix products
    are small (at most batch x 784 x 128) and each party process already runs Go
    goroutines and transport threads next to its peers on the same cores: OpenBLAS's own
    pool then spins against them (measured on the 2-core machine under load: a
    128 x 784 x 128 product 20-100 ms with two BLAS threads, under 1 ms with one).
    threadpoolctl comes with scikit-learn; without it BLAS keeps its default."""
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415
    except ImportError:  # pragma: no cover - a scikit-learn dependency
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def check_model(graph, security: str) -> None:
    if security not in ("malicious", "semi-honest"):
        raise ProtocolError(f"crisp offers 'malicious' (malicious client) or 'semi-honest', not {security!r}")
    check_graph(graph)


SPEC = ProtocolSpec(
    name="crisp",
    description="2PC inference secure against a malicious client: FSS non-linear layers with MACs, "
                "CKKS linear layers with the MAC in the imaginary part, one consistency check; "
                "trusted offline dealer",
    roles=(SERVER, CLIENT, DEALER),
    model_role=SERVER,
    input_role=CLIENT,
    securities=("semi-honest", "malicious"),
    default_security="malicious",
    run_party=run_party,
    check_model=check_model,
    default_fixed="fx64f13",
    bias_in_sum=True,   # the truncation gate takes acc + b 2^f (docs/protocols/crisp.md): for the range certificate
    paper="crisp-2pc-malicious-client.txt",
    trust="TRUSTED: the 'dealer' party is a trusted offline dealer (F_FSS, it sees the FSS keys and masks); it must not collude with the server or the client [CRISP III-B]",
    demo_rows=4,
    prepare=prepare, run_prepared=run_prepared, prep_refusal=prep_refusal,
    checks=(
        Check(CONSISTENCY, "the MACs of every gate input and linear output fold to q = 0 mod 2^(n+s)",
              "CRISP Fig. 4 step 4"),
        Check("crisp-popk", "proof of plaintext knowledge of the client's ciphertexts (HE engine)",
              "CRISP Fig. 2 note a"),
        Check("crisp-pk", "proof that the client's public key is well formed (HE engine)",
              "CRISP Fig. 2 InitLin"),
    ),
)
