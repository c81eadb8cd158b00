"""STAMP's LTEE-assisted non-linear protocols [STAMP Protocols 4-6, 4.2-4.5].

Three paths, each two inter-party rounds, each run on a *list of jobs* in lockstep so
the batch can be split across the three parties [STAMP 4.2] (job c has leader c):

* ``rss``   [STAMP Protocol 4]: input is replicated. Leader i masks its component x_i with
  GenMask(i) and sends it to evaluator e = i+1, whose LTEE unmasks, runs the plaintext
  chain (ReLU, MaxPool, BatchNorm, LayerNorm, truncation, ...) and re-shares the result;
  the real share goes to the third party t = i+2 (the step-5 reshare).
* ``3of3``  [STAMP Protocol 5]: input is the 3-out-of-3 sum after a local matrix product; the
  two non-evaluators mask with GenMaskShare and send to the evaluator, whose LTEE adds
  its own mask, truncates (merging the multiplication's truncation into the
  non-linear step [STAMP 4.3]) and runs the chain.
* ``exp``   [STAMP Protocol 6]: softmax; hosts exponentiate their own shares in floating point
  and send masked mantissa/exponent; the LTEE only multiplies and corrects.

Malicious [blue steps]: the component sent in step 2 is sent by both of its holders and
compared by the receiver; a second, independent evaluation runs in the leader's LTEE on
the duplicated (hat) counters; the third party receives the real output share twice
(once from each LTEE, the second one padded for it alone) and compares. The 3-out-of-3
path is not used in the malicious setting: the product is first verified
(``Engine.reshare_verified``, checked by ``flush_checks`` before any reveal) and then goes through the ``rss`` path.
When the result feeds products only, the two LTEEs share it as A + rho instead, A being
the next product's triple mask: the evaluator's LTEE gives the real component A_t + rho,
the leader's gives rho, the third party compares (``Job.act``; the next product opens no rho).

``output``: the graph's last product fused with the opening to the output party, whose
LTEE truncates and returns the plaintext (one job, one round; malicious: after the
product's check, with a copy and a hash and the LTEEs' MACs).
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.errors import FixedPointRangeError, ProtocolError
from secinfer.net.channel import ArraySpec
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.rep3.engine import Engine, digest
from secinfer.protocols.stamp.jobs import Job
from secinfer.protocols.stamp.ltee import LteeLink, LteeRefused, expect_arrays, spec_bytes
from secinfer.protocols.stamp.ltee_bus import EXP_BITS, MANT_BITS, SLOTS, expand, zero_component
from secinfer.sharing.replicated import Pair

U64 = np.uint64
MAX_JOBS = SLOTS   # jobs of one device operation: three batch parts of up to three products
_M52 = U64((1 << MANT_BITS) - 1)
_M32 = U64((1 << EXP_BITS) - 1)


RANGE_GUARD = "range-guard"


class _WarmMiss(Exception):
    """``StampOps.warm``: an operation's seeds were not served ahead (the warm run stops)."""


PREFETCH_CHUNK = 64 * SLOTS   # seed requests per prefetch transaction (``ltee_device.PREFETCH_MAX``)


def seed_signature(reqs: list) -> tuple:
    """What identifies an operation's seed requests: keys, commands, metas, kinds."""
    return tuple((k, cmd, np.asarray(meta).tobytes(), kind) for k, cmd, meta, kind in reqs)


def range_abort(ep, detail: str) -> FixedPointRangeError:
    """The range guard tripped in this party's LTEE (``kernels.shadow_check``): tell every
    peer (they stop with ``PeerAbortedError`` naming "range-guard"; ``protocol.run_party``
    turns it into this same error) and return the typed error to raise. A correctness guard
    for honest queries, not a malicious-security check: nothing is suspected."""
    ep.abort(RANGE_GUARD, None, detail)
    return FixedPointRangeError(detail)


class StampOps:
    """Runs the device paths for one party: engine + its LTEE link + the counters."""

    def __init__(self, eng: Engine, link: LteeLink) -> None:
        self.eng = eng
        self.link = link
        self.op = 0          # operation number shared by the three hosts
        self.ctr = 0         # every LTEE counter (all advance by n per operation [STAMP 4.2])
        self.triple_stats = np.zeros(5, dtype=np.int64)   # device work spent on triples
        self.triple_bus = 0
        self._n_op = 0
        # seed requests of future operations (semi-honest; ``plan``/``prefetch``): a dry run
        # records them, the device serves them before the online phase
        self.recording: list | None = None        # [(op, requests)] while a dry run records
        self._ahead: dict[int, tuple] = {}        # op -> (its requests' signature, their results)
        self._plan: list = []                     # recorded by ``plan``, asked for by ``prefetch``
        self._expanded: dict[tuple, np.ndarray] = {}   # masks expanded ahead, by (seed, component, n)
        # messages sent ahead (semi-honest; ``ahead``/``exchange_ahead``): a second dry run
        # with the prefetched seeds computes the 3-out-of-3 components that depend on offline
        # data only; they are sent before the online phase and not again
        self._early_run = False
        self._early_out: list = []       # (to, tag, op, sub, value) computed by the dry run
        self._early_in: list = []        # (from, tag, op, sub, n) expected
        self._sent_ahead: set = set()    # (op, sub, tag) this party sent ahead
        self._got_ahead: dict = {}       # (op, sub, from) -> the component received ahead
        self._got_sum: dict = {}         # (op, sub) -> the sum of both received ahead (``exchange_ahead``)
        self._declared: list = []        # ("send" | "recv", party, tag, n): the online frames left
        # semi-honest, seeds served ahead (``StampBackend.prefetch``): the evaluator also asks for
        # its own output zero-share seeds (the ones its LTEE returns with the evaluation), so its
        # component of the result is expanded before the query
        self.evaluator_seeds = False
        # the operation specs of this party's online device requests, recorded by the dry run
        # and given to the LTEE with the prefetch (option stamp_ship_specs, default on)
        self._spec_plan: list = []
        self.ship_specs = True
        self._expect: list = []   # [(code, meta, spec)]: its online eval/output requests (``ltee_ahead``)
        # semi-honest, recorded by the dry run (``plan``): each job's spec, validated, its sizes
        # and (for the specs this party's LTEE evaluates) its bytes, by (operation, job); online
        # they are reused when the job's spec is equal (``_facts``, ``_spec_of``)
        self._spec_memo: dict = {}
        # option stamp_warm_online (``warm``): the online steps run once before the "ready" on
        # scratch inputs -- nothing sent, received or asked of the device, nothing taken
        self.warming = False
        # ``online_plan``: each operation as ``warm`` saw it; the counters at the warm run's end
        self.trace, self.warm_end = None, None

    # ---- device requests ---------------------------------------------------------------
    def _meta(self, sub: int, *extra: int) -> np.ndarray:
        return np.array([self.op, self._n_op, self.ctr, sub, *extra], dtype=np.int64)

    def _dev(self, cmd: str, *arrays, kind: str):
        try:
            return self.link.call(cmd, *arrays, kind=kind)
        except LteeRefused as r:   # the device's check failed: this host aborts with it
            refused = r
        if refused.code == "range":   # the range guard: the query's value left the ring (not a security check)
            raise range_abort(self.eng.ep, refused.detail)
        self.eng.ep.require(False, refused.check, self.eng.names[self.eng.me], refused.detail)

    def _dev_many(self, reqs: list, ahead: bool = False) -> list:
        """``_dev`` of several seed requests [(command, meta, kind)] in one bus transaction
        (``ahead``: of future operations, ``prefetch``)."""
        try:
            return self.link.call_many(reqs, ahead=True) if ahead else self.link.call_many(reqs)
        except LteeRefused as r:
            refused = r
        if refused.code == "range":
            raise range_abort(self.eng.ep, refused.detail)
        self.eng.ep.require(False, refused.check, self.eng.names[self.eng.me], refused.detail)

    def _seeds(self, reqs: list) -> dict:
        """The results of this operation's seed requests [(key, command, meta, kind)]: served
        ahead of time (``prefetch``) when the dry run recorded exactly these, else in one bus
        transaction now."""
        if not reqs:
            return {}
        got = self.take(self._ahead, self.op)
        if got is not None and got[0] == seed_signature(reqs):
            return got[1]
        if self.warming:   # (not served ahead: the warm run stops here, ``warm``)
            raise _WarmMiss
        return dict(zip([k for k, _, _, _ in reqs], self._dev_many([r[1:] for r in reqs])))

    def plan(self, dry_run) -> int:
        """Record the seed requests of every operation ``dry_run()`` makes (the graph run on
        zeros, ``StampBackend.prefetch``: sizes, leaders and counters depend on the model and
        batch only), with no message and no device call; restores the operation counters.
        Returns the number of operations recorded."""
        op, ctr = self.op, self.ctr
        self.recording = []
        try:
            dry_run()
            plan = self.recording
        finally:
            self.recording = None
            self.op, self.ctr = op, ctr
        self._plan = plan
        return len(plan)

    def prefetch(self, budget: int = 1 << 26) -> int:
        """Ask the device for every recorded seed request ahead of its operation (one bus
        transaction per ``PREFETCH_CHUNK`` requests; ``ltee_device.cmd_prefetch``), and expand
        the masks this party will add to what it sends, up to ``budget`` bytes. Before the
        online phase: none of it depends on the query. Returns the requests served."""
        plan, self._plan = self._plan, []
        specs, self._spec_plan = list({b.tobytes(): b for b in self._spec_plan}.values()), []
        if specs and self.ship_specs:   # parsed and validated by the LTEE now, not online (``cmd_specs``)
            self._dev("specs", *specs, kind="specs")
        expect, self._expect = self._expect, []
        if expect and self.ship_specs:  # their seeds and expansions made by the LTEE now (``cmd_expect``)
            self._dev("expect", *expect_arrays(expect), kind="expect")
        flat = [(op, r) for op, reqs in plan for r in reqs]
        results: list = []
        for k in range(0, len(flat), PREFETCH_CHUNK):
            part = flat[k:k + PREFETCH_CHUNK]
            results += self._dev_many([r[1:] for _, r in part], ahead=True)
        ring, me = self.eng.ring, self.eng.me
        for op, reqs in plan:
            got = {}
            for r in reqs:
                got[r[0]] = res = results.pop(0)
                cmd, meta = r[1], r[2]
                if budget <= 0:
                    continue
                if cmd in ("inmask", "outmask") and len(res) == 1 and res[0].ndim == 2:
                    n = int(meta[5])
                    comps = [me]
                elif cmd == "zshare" and not self.eng.malicious:
                    n, t = int(meta[6]), int(meta[4])   # t: (me + 1) % 3 only for the evaluator
                    comps = [(me + 1) % 3] if me == t else [me] if t == (me + 1) % 3 else [me, (me + 1) % 3]
                elif cmd == "mask" and int(meta[7]) == 0:
                    n = int(meta[6])
                    self._expanded[("m", res[0].tobytes(), n)] = self._mask(res[0], n, ring.mask)
                    budget -= 8 * n
                    continue
                else:
                    continue
                for c in comps:
                    self._expanded[(res[0].tobytes(), c, n)] = self._comp(res[0], c, n)
                    budget -= 8 * n
            self._ahead[op] = (seed_signature(reqs), got)
        return len(flat)

    def ahead(self, dry_run) -> int:
        """After ``prefetch``: run the graph dry once more (``dry_run``), now with the
        prefetched seeds, computing every masked 3-out-of-3 component this party sends that
        depends on offline data only (``Job.early``: its part of a first-layer product,
        ``input_offline``, or of a product of a held result, ``StampBackend._plan_held``) and
        noting the ones it will receive so. The same values the online phase would send,
        sent earlier (``exchange_ahead``); the devices serve and release what they did.
        Restores the operation counters. Returns the number of messages to send."""
        op, ctr = self.op, self.ctr
        self.recording, self._early_run = [], True
        self._early_out, self._early_in, self._declared = [], [], []
        try:
            dry_run()
        finally:
            self.recording, self._early_run = None, False
            self.op, self.ctr = op, ctr
        return len(self._early_out)

    def exchange_ahead(self) -> None:
        """Send the components ``ahead`` computed, then receive those the peers send ahead
        (each peer's in the order of its operations, as it sends them), before the online
        phase: metered offline, under the tags the online phase would use."""
        eng = self.eng
        for to, tag, op, sub, value in self._early_out:
            eng.send_ring(to, tag, value)
            self._sent_ahead.add((op, sub, tag))
        for frm, tag, op, sub, n in self._early_in:
            (self._got_ahead[(op, sub, frm)],) = eng.recv_ring(frm, tag, n)
        # where both other parties' components of a job came ahead, their sum is made now
        # (the receiver adds only its own online, ``_got_both``)
        me, ring = eng.me, eng.ring
        for op, sub in {(op, sub) for _, _, op, sub, _ in self._early_in}:
            keys = [(op, sub, p) for p in range(3) if p != me]
            if all(k in self._got_ahead for k in keys):
                self._got_sum[(op, sub)] = ring.add(*[self._got_ahead.pop(k) for k in keys])
        self._early_out, self._early_in = [], []

    def declare_online(self) -> int:
        """Declare the online frames ``ahead``'s dry run saw this party send and receive
        (``Endpoint.expect_send``/``expect_recv``: one ring vector each), so that a transport
        with frame templates builds them now, not on the first -- at one query the only --
        frame of each tag (issue #23). Nothing is sent; the frames are the same."""
        eng = self.eng
        seen = set()
        for way, p, tag, n in self._declared:
            if (way, p, tag, n) in seen:
                continue
            seen.add((way, p, tag, n))
            (eng.ep.expect_send if way == "send" else eng.ep.expect_recv)(eng.names[p], tag, eng.wire, (int(n),))
        self._declared = []
        return len(seen)

    def _peek_seeds(self, key) -> np.ndarray | None:
        """During ``ahead``: the prefetched seed of this operation's request ``key``."""
        got = self._ahead.get(self.op)
        if got is None or key not in got[1]:
            return None
        return got[1][key][0]

    def _peek_comp(self, seeds: np.ndarray, c: int, n: int) -> np.ndarray:
        """``_comp`` without taking the expanded mask (the online phase still takes it)."""
        got = self._expanded.get((seeds.tobytes(), c, n))
        if got is not None:
            return got
        sd = {k: bytes(seeds[k]) for k in (c, (c + 1) % 3)}
        return zero_component(sd, c, n, self.eng.ring.mask)

    # ---- helpers -----------------------------------------------------------------------
    def _comp(self, seeds: np.ndarray, c: int, n: int) -> np.ndarray:
        """Component c of an LTEE zero-sharing from the released stream seeds (expanded
        ahead of time by ``prefetch`` if it was; ``warm``: looked at, not taken)."""
        if self.warming:
            return self._peek_comp(seeds, c, n)
        if self._expanded:
            got = self._expanded.pop((seeds.tobytes(), c, n), None)
            if got is not None:
                return got
        sd = {k: bytes(seeds[k]) for k in (c, (c + 1) % 3)}
        self.eng.ep.require(all(any(v) for v in sd.values()), "ltee-seed", self.eng.names[self.eng.me],
                            "a needed seed was withheld")
        return zero_component(sd, c, n, self.eng.ring.mask)

    def _mask(self, seed: np.ndarray, n: int, mask) -> np.ndarray:
        if self._expanded and mask == self.eng.ring.mask:
            got = self.take(self._expanded, ("m", seed.tobytes(), n))
            if got is not None:
                return got
        return expand(bytes(seed), n) & mask

    def take(self, kept: dict, key):
        """``kept[key]`` made ahead for the online phase, taken (None if absent); ``warm``:
        looked at, not taken."""
        return kept.get(key) if self.warming else kept.pop(key, None)

    # ---- the online steps' messages and device answers (``warm``: none of them) ------------
    def _send(self, to: int, tag: str, value: np.ndarray) -> None:
        if self.warming:
            self.eng.pack(value)       # (the same conversion, nothing sent)
        else:
            self.eng.send_ring(to, tag, value)

    def _recv(self, frm: int, tag: str, n: int) -> np.ndarray:
        if self.warming:
            return np.zeros(int(n), dtype=U64)
        return self.eng.recv_ring(frm, tag, n)[0]

    def _was_sent(self, key: tuple) -> bool:
        """Whether this party sent ``key`` = (op, sub, tag) ahead (``exchange_ahead``); taken."""
        if key not in self._sent_ahead:
            return False
        if not self.warming:
            self._sent_ahead.discard(key)
        return True

    def _others(self, sub: int, senders: tuple, tag: str, n: int) -> np.ndarray:
        """The sum of the two other parties' components of job ``sub`` of this operation: made
        before the online phase when both came ahead, else from what came ahead and online."""
        key = (self.op, sub)
        got = self.take(self._got_sum, key)
        if got is not None:
            return got
        parts = [self.take(self._got_ahead, (self.op, sub, p)) for p in senders]
        parts = [v if v is not None else self._recv(p, tag, n) for v, p in zip(parts, senders)]
        return self.eng.ring.add(parts[0], parts[1])

    def _evaluate(self, meta: np.ndarray, spec: np.ndarray, payload: list, ahead, n_out: int) -> list:
        """The semi-honest evaluation (seeds, real component); ``warm``: its shapes, with the
        seeds served ahead (``ahead``, the evaluator's \"ze\" request) where there are."""
        if self.warming:
            return [ahead[0] if ahead is not None else np.zeros((3, 16), np.uint8), np.zeros(n_out, U64)]
        return self._dev("eval", meta, spec, *payload, kind="eval")

    def _facts(self, spec: dict, sub: int) -> list:
        """[spec, its bytes or None, n_in, out shape, n_out] of job ``sub`` of this operation,
        the spec validated (``kernels.validate``). Semi-honest: recorded by the plan dry run
        (``_spec_memo``) and taken from there online when the job's spec is equal."""
        key = (self.op, sub)
        got = self._spec_memo.get(key)
        if got is not None and got[0] == spec:
            return got
        kernels.validate(spec)
        oshape = kernels.out_shape(spec)
        facts = [spec, None, int(math.prod(spec["shape"])) + kernels.n_params(spec), oshape, int(math.prod(oshape))]
        if self.recording is not None and not self._early_run and not self.eng.malicious:
            self._spec_memo[key] = facts
        return facts

    def _spec_of(self, spec: dict, sub: int) -> np.ndarray:
        """``spec_bytes(spec)``, serialized once (``_facts``: the dry run's record when equal)."""
        facts = self._facts(spec, sub)
        if facts[1] is None:
            facts[1] = spec_bytes(spec)
        return facts[1]

    def warm(self, dry_run) -> bool:
        """Option ``stamp_warm_online`` (semi-honest, after ``prefetch``/``ahead``): run the
        online steps once (``dry_run()``: the graph on scratch inputs of the real shapes) so
        that the query's first call of each numpy function, kernel and code path in this
        process is not inside the online phase (issue #23; ASTRA's ``warm_online``). Nothing
        is sent or received (zeros of the messages' shapes), the device is not called (zeros
        and the seeds served ahead as its answers), no seed, mask, component received ahead
        or counter is taken, and the results are discarded. An operation whose seeds were not
        served ahead stops it there (returns False)."""
        if self.eng.malicious:
            return False
        op, ctr, n_op = self.op, self.ctr, self._n_op
        self.warming = True
        try:
            dry_run()
            self.warm_end = (self.op, self.ctr, self._n_op)
            return True
        except _WarmMiss:
            return False
        finally:
            self.warming = False
            self.op, self.ctr, self._n_op = op, ctr, n_op

    @staticmethod
    def _flat_pair(job: Job) -> Pair:
        a = [job.data.a.reshape(-1)] + [p.a.reshape(-1) for p in job.params]
        b = [job.data.b.reshape(-1)] + [p.b.reshape(-1) for p in job.params]
        return Pair(np.concatenate(a), np.concatenate(b))

    @staticmethod
    def _flat_3(job: Job) -> np.ndarray:
        return np.concatenate([job.data.reshape(-1)] + [p.a.reshape(-1) for p in job.params])

    def _exp_split(self, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """exp(comp / 2^fp) = 2^q * m, m in [1, 2): (52-bit mantissa fraction, q) [STAMP Protocol 6 step 1]."""
        t = comp.astype(np.float64) / self.eng.cfg.scale * np.log2(np.e)
        q = np.floor(t)
        frac = np.exp2(t - q) - 1.0
        mant = np.minimum(np.floor(frac * 2.0 ** MANT_BITS), 2.0 ** MANT_BITS - 1).astype(U64)
        return mant, q.astype(np.int64).astype(U64) & _M32

    # ---- the three paths ---------------------------------------------------------------
    def run(self, jobs: list[Job], path: str) -> list[Pair]:
        """Evaluate every job (two rounds for all of them together)."""
        eng = self.eng
        me, mal = eng.me, eng.malicious
        if path == "3of3" and mal:
            raise ProtocolError("the 3-out-of-3 path is semi-honest only; verify the product first")
        names, ep = eng.names, eng.ep
        ring = eng.ring
        if not 1 <= len(jobs) <= MAX_JOBS:
            raise ProtocolError(f"a device operation runs one to {MAX_JOBS} jobs (the batch split of [STAMP 4.2])")
        facts = [self._facts(job.spec, sub) for sub, job in enumerate(jobs)]
        self._n_op = SLOTS * max(max(f[2], f[4]) for f in facts)   # one operation, one counter slot per job
        st = []
        # every device request that needs no peer's message -- step 1's masks, step 3's
        # zero-share seeds and step 5's pad -- in one bus transaction (``LteeLink.call_many``)
        reqs = []
        for sub, job in enumerate(jobs):
            i = job.leader
            e, t = (i + 1) % 3, (i + 2) % 3
            n_in, n_out = facts[sub][2], facts[sub][4]
            st.append(dict(sub=sub, n_in=n_in, n_out=n_out, i=i, e=e, t=t))
            if path == "3of3":
                if me != e:
                    reqs.append(((sub, "x"), "inmask", self._meta(sub, e, n_in), "mask"))
            else:
                kind = 0 if path == "rss" else 1
                if me == i or (mal and me == t):          # holders of component i
                    reqs.append(((sub, "x"), "mask", self._meta(sub, i, 0, n_in, kind), "mask"))
                if mal and me in (t, e):                  # holders of component t
                    reqs.append(((sub, "x^"), "mask", self._meta(sub, t, 1, n_in, kind), "mask"))
            if me == t and job.act is None:
                reqs.append(((sub, "z"), "zshare", self._meta(sub, t, 0, n_out), "share"))
                if mal:
                    reqs.append(((sub, "pad"), "pad", self._meta(sub, n_out), "pad"))
            elif me == i and not mal:
                reqs.append(((sub, "z"), "zshare", self._meta(sub, t, 0, n_out), "share"))
            elif me == e and not mal and self.evaluator_seeds:
                # the seeds of components e and t its LTEE returns with the evaluation (the same
                # counter and label: ``cmd_zshare`` releases exactly those to e), ahead
                reqs.append(((sub, "ze"), "zshare", self._meta(sub, t, 0, n_out), "share"))
        if self.trace is not None and self.warming:   # (``online_plan.compile_plan`` reads it)
            self.trace.append(("run", path, self.op, self.ctr, self._n_op, jobs, facts, reqs, self._ahead.get(self.op)))
        if self.recording is not None:    # dry run (``plan``): no message, no device
            for job, s in zip(jobs, st):  # the specs this party's LTEE will evaluate (``prefetch``)
                if not self._early_run and (me == s["e"] or (mal and me == s["i"])):
                    self._spec_plan.append(self._spec_of(job.spec, s["sub"]))
                    if me == s["e"] and not mal:
                        mode = {"rss": 0, "3of3": 1}.get(path, 2)
                        self._expect.append((0, self._meta(s["sub"], mode, 0), self._spec_plan[-1]))
            return self._record(jobs, reqs, path, st)
        seeds = self._seeds(reqs)
        # step 1-2: mask and send
        for job, base in zip(jobs, st):
            i, e, t, sub, n_in = base["i"], base["e"], base["t"], base["sub"], base["n_in"]
            if path == "3of3":
                if me != e and self._was_sent((self.op, sub, "stamp/x'")):
                    pass                                   # (sent before the online phase)
                elif me != e:
                    (sd,) = seeds[(sub, "x")]
                    self._send(e, "stamp/x'", ring.add(self._flat_3(job), self._comp(sd, me, n_in)))
            elif path == "rss":
                flat = self._flat_pair(job)
                comp_i = flat.a if me == i else (flat.b if me == t else None)
                if comp_i is not None and (me == i or mal):      # holders of component i
                    (sd,) = seeds[(sub, "x")]
                    self._send(e, "stamp/x'", ring.add(comp_i, self._mask(sd, n_in, ring.mask)))
                if mal:
                    comp_t = flat.a if me == t else (flat.b if me == e else None)
                    if comp_t is not None:                        # holders of component t
                        (sd,) = seeds[(sub, "x^")]
                        eng.send_ring(i, "stamp/x'^", ring.add(comp_t, self._mask(sd, n_in, ring.mask)))
                base["flat"] = flat
            else:  # exp
                flat = self._flat_pair(job)
                comp_i = flat.a if me == i else (flat.b if me == t else None)
                if comp_i is not None and (me == i or mal):
                    sa, sb = seeds[(sub, "x")]
                    al, be = self._mask(sa, n_in, _M52), self._mask(sb, n_in, _M32)
                    mm, qq = self._exp_split(comp_i)
                    if self.warming:
                        raise _WarmMiss   # (softmax: not warmed)
                    ep.send(names[e], "stamp/exp'", (mm + al) & _M52, ((qq + be) & _M32).astype(np.uint32))
                if mal:
                    comp_t = flat.a if me == t else (flat.b if me == e else None)
                    if comp_t is not None:
                        sa, sb = seeds[(sub, "x^")]
                        al, be = self._mask(sa, n_in, _M52), self._mask(sb, n_in, _M32)
                        mm, qq = self._exp_split(comp_t)
                        ep.send(names[i], "stamp/exp'^", (mm + al) & _M52, ((qq + be) & _M32).astype(np.uint32))
                base["flat"] = flat
        # re-shares of premultiplied products sent before step 2 (``Engine.reshare_send``)
        eng.recv_deferred()
        # step 3-5: receive, compare (malicious), evaluate in the LTEE, re-share
        for job, s in zip(jobs, st):
            i, e, t, sub, n_in = s["i"], s["e"], s["t"], s["sub"], s["n_in"]
            spec = self._spec_of(job.spec, sub) if me == e or (mal and me == i) else None
            if me == e:
                if path == "3of3":
                    payload = [eng.pack(ring.add(self._others(sub, (i, t), "stamp/x'", n_in), self._flat_3(job)))]
                    mode = 1
                elif path == "rss":
                    xp = self._recv(i, "stamp/x'", n_in) if self.warming else \
                        self._recv_dup(i, t, "stamp/x'", [eng.wire], n_in, "relu-step2")[0]
                    fl = s["flat"]
                    payload = [eng.pack(ring.add(ring.add(xp, fl.a), fl.b))]
                    mode = 0
                else:
                    mstar, qstar = self._recv_dup(i, t, "stamp/exp'", [U64, np.uint32], n_in, "softmax-step2")
                    fl = s["flat"]
                    mh, qh = self._exp_split(ring.add(fl.a, fl.b))
                    payload = [((qstar + qh) & _M32).astype(np.uint32), mstar, mh]
                    mode = 2
                if job.act is not None:   # holds (A_e, A_t): the real component is A_t + rho
                    (zb,) = self._dev("eval", self._meta(sub, mode, 0), spec, *payload, kind="eval")
                    job.result, job.rho = Pair(job.act.a, zb), ring.sub(zb, job.act.b)
                else:
                    sd, zb = self._evaluate(self._meta(sub, mode, 0), spec, payload, seeds.get((sub, "ze")),
                                            s["n_out"])
                    job.result = Pair(self._comp(sd, me, zb.size), zb)
                if not job.hold:
                    self._send(t, "stamp/z", zb)
            elif me == i and mal:
                fl = s["flat"]
                if path == "rss":
                    xp = self._recv_dup(t, e, "stamp/x'^", [eng.wire], n_in, "relu-step2")[0]
                    payload = [eng.pack(ring.add(ring.add(xp, fl.a), fl.b))]
                    mode = 0
                else:
                    mstar, qstar = self._recv_dup(t, e, "stamp/exp'^", [U64, np.uint32], n_in, "softmax-step2")
                    mh, qh = self._exp_split(ring.add(fl.a, fl.b))
                    payload = [((qstar + qh) & _M32).astype(np.uint32), mstar, mh]
                    mode = 2
                if job.act is not None:   # holds (A_i, A_e); its LTEE gives it rho, for the third party
                    (rho,) = self._dev("eval", self._meta(sub, mode, 1), spec, *payload, kind="eval")
                    job.result, job.rho = Pair(job.act.a, job.act.b), rho
                    eng.send_ring(t, "stamp/rho^", rho)
                else:
                    sd, padded = self._dev("eval", self._meta(sub, mode, 1), spec, *payload, kind="eval")
                    job.result = Pair(self._comp(sd, me, padded.size), self._comp(sd, (me + 1) % 3, padded.size))
                    eng.send_ring(t, "stamp/z^", padded)
            elif me == i:
                (sd,) = seeds[(sub, "z")]
                job.result = Pair(self._comp(sd, me, s["n_out"]), self._comp(sd, (me + 1) % 3, s["n_out"]))
        # malicious: the hashes of the pending deltas travel with the step-5 messages
        # (``Engine.start_check``); compared below, before the operation returns
        checking = mal and eng.start_check()
        for job, s in zip(jobs, st):
            i, e, t, sub, n_out = s["i"], s["e"], s["t"], s["sub"], s["n_out"]
            if me != t:
                continue
            if job.act is not None:       # holds (A_t, A_i); A_t + rho from e, rho from i: compared
                (real,) = eng.recv_ring(e, "stamp/z", n_out)
                (rho,) = eng.recv_ring(i, "stamp/rho^", n_out)
                ep.require(np.array_equal(ring.sub(real, job.act.a), rho), "relu-step5", None,
                           "the two LTEE evaluations' results disagree")
                job.result, job.rho = Pair(real, job.act.b), rho
                continue
            (sd,) = seeds[(sub, "z")]
            zi = self._comp(sd, (me + 1) % 3, n_out)
            if job.hold and not mal:      # the real component stays with the evaluator (the
                job.result = Pair(np.zeros(n_out, dtype=U64), zi)   # owner); only zi is used
                continue
            real = self._recv(e, "stamp/z", n_out)
            if mal:
                (padded,) = eng.recv_ring(i, "stamp/z^", n_out)
                (sd,) = seeds[(sub, "pad")]
                ep.require(np.array_equal(ring.sub(padded, self._mask(sd, n_out, ring.mask)), real), "relu-step5", None,
                           "the two LTEE evaluations' output shares disagree")
            job.result = Pair(real, zi)
        if checking:
            eng.finish_check()
        self.op += 1
        self.ctr += self._n_op
        outs = []
        for job, f in zip(jobs, facts):
            oshape = f[3]
            outs.append(Pair(job.result.a.reshape(oshape), job.result.b.reshape(oshape)))
        return outs

    def _record(self, jobs: list, reqs: list, path: str = "", st: list | None = None) -> list[Pair]:
        """Dry run (``plan``): record the operation's seed requests, advance the counters,
        return zeros of the outputs' shapes. In ``ahead``'s dry run also: the components
        sent ahead (``Job.early``), those expected from the peers, and the results that
        come from the prefetched seeds alone (the leader's; the third party's of a held
        step), which a product of a held result takes."""
        self.recording.append((self.op, reqs))
        me, ring = self.eng.me, self.eng.ring
        outs = []
        for k, job in enumerate(jobs):
            z = np.zeros(kernels.out_shape(job.spec), dtype=U64)
            res = Pair(z, z)
            if self._early_run and st is not None and path in ("3of3", "rss") and not self.eng.malicious:
                i, e, t, sub, n_in, n_out = (st[k][x] for x in ("i", "e", "t", "sub", "n_in", "n_out"))
                dec = self._declared
                if path == "rss":                  # step 2, leader to evaluator
                    dec += [("send", e, "stamp/x'", n_in)] if me == i else []
                    dec += [("recv", i, "stamp/x'", n_in)] if me == e else []
                if not job.hold and job.act is None:   # step 5, the real component to t
                    dec += [("send", t, "stamp/z", n_out)] if me == e else []
                    dec += [("recv", e, "stamp/z", n_out)] if me == t else []
                if path != "3of3":
                    pass
                elif me == e:
                    dec += [("recv", p, "stamp/x'", n_in) for p in (i, t) if p not in job.early]
                elif me not in job.early:
                    dec.append(("send", e, "stamp/x'", n_in))
                if path != "3of3":
                    pass
                elif me != e and me in job.early:
                    sd = self._peek_seeds((sub, "x"))
                    if sd is not None:
                        self._early_out.append((e, "stamp/x'", self.op, sub,
                                                ring.add(self._flat_3(job), self._comp(sd, me, n_in))))
                elif me == e:
                    self._early_in += [(p, "stamp/x'", self.op, sub, n_in) for p in (i, t) if p in job.early]
                sd = self._peek_seeds((sub, "z"))
                if sd is not None and (me == i or (me == t and job.hold)):
                    zi = self._peek_comp(sd, (me + 1) % 3, n_out).reshape(z.shape)
                    res = Pair(self._peek_comp(sd, me, n_out).reshape(z.shape), zi) if me == i else Pair(z, zi)
            outs.append(res)
        self.op += 1
        self.ctr += self._n_op
        return outs

    def output(self, job: Job, receiver: int) -> np.ndarray | None:
        """The fused output step: the graph's last product goes, masked, to ``receiver``
        (the output party), whose LTEE unmasks it, truncates exactly, adds the bias and
        returns the plaintext output to its own host only (``ltee_device.cmd_output``): one
        round instead of the device path's two plus the opening. Protocol 5 steps 2-5 with
        the opening in place of the re-sharing; one job, not split across the batch [STAMP 4.2]:
        only the receiver's LTEE may produce the output. Returns the output at the
        receiver, None elsewhere.

        Semi-honest: ``job.data`` is this party's 3-out-of-3 component of the product; the
        two others mask theirs with GenMaskShare components and send them [STAMP Protocol 5 steps
        2-3]. Malicious: ``job.data`` is the verified 2-out-of-3 product -- the caller has
        run the delta check (``Engine.flush_checks``) before, so the receiver's LTEE only
        ever sees a verified product. Party r-1 sends c = z_{r-1} + m + z_r (m: GenMask of
        stream r-1, the component r lacks), party r+1 the hash of z_{r-1} + m, which r's
        host compares with c - z_r (``output-consistency``: a copy and a hash of the one
        component r lacks, as the malicious opening); each of them adds its LTEE's MAC of
        the vector it vouches for (c, resp. z_{r+1}), and r's LTEE refuses unless both
        MACs hold, so r's host cannot alter what its LTEE truncates (a shifted product
        would tell it bits below the truncation)."""
        eng, ring = self.eng, self.eng.ring
        me, mal, ep, names = eng.me, eng.malicious, eng.ep, eng.names
        _, _, n_in, oshape, n_out = facts = self._facts(job.spec, 0)
        self._n_op = SLOTS * max(n_in, n_out)
        r = receiver
        lo, hi = (r - 1) % 3, (r + 1) % 3
        y = None
        if self.recording is not None:    # dry run (``plan``)
            reqs = [((0, "o"), "outmask", self._meta(0, 0, n_in), "mask")] if not mal and me != r else []
            if self._early_run and not mal:   # ``ahead``: the output step's components, likewise
                sd = self._peek_seeds((0, "o")) if me != r and me in job.early else None
                if sd is not None:
                    self._early_out.append((r, "stamp/out'", self.op, 0,
                                            ring.add(self._flat_3(job), self._comp(sd, me, n_in))))
                elif me == r:
                    self._early_in += [(p, "stamp/out'", self.op, 0, n_in) for p in (lo, hi) if p in job.early]
                if me == r:    # the online frames left (``declare_online``)
                    self._declared += [("recv", p, "stamp/out'", n_in) for p in (lo, hi) if p not in job.early]
                elif me not in job.early:
                    self._declared.append(("send", r, "stamp/out'", n_in))
            if me == r and not self._early_run:
                self._spec_plan.append(self._spec_of(job.spec, 0))
                if not mal:
                    self._expect.append((1, self._meta(0, 0), self._spec_plan[-1]))
            self._record([], reqs)
            return None if me != r else np.zeros(oshape, dtype=U64)
        if self.trace is not None and self.warming and not mal:   # (``online_plan``; the seeds ``_seeds`` takes)
            reqs = [] if me == r or (self.op, 0, "stamp/out'") in self._sent_ahead else \
                [((0, "o"), "outmask", self._meta(0, 0, n_in), "mask")]
            self.trace.append(("output", r, self.op, self.ctr, self._n_op, [job], [facts], reqs,
                               self._ahead.get(self.op)))
        if not mal:
            if me != r and self._was_sent((self.op, 0, "stamp/out'")):
                pass                                       # (sent before the online phase)
            elif me != r:
                (sd,) = self._seeds([((0, "o"), "outmask", self._meta(0, 0, n_in), "mask")])[(0, "o")]
                self._send(r, "stamp/out'", ring.add(self._flat_3(job), self._comp(sd, me, n_in)))
            else:
                s = ring.add(self._others(0, (lo, hi), "stamp/out'", n_in), self._flat_3(job))
                spec = self._spec_of(job.spec, 0)
                if self.warming:
                    eng.pack(s)
                    y = np.zeros(n_out, dtype=U64)
                else:
                    (y,) = self._dev("output", self._meta(0, 0), spec, eng.pack(s), kind="output")
        else:
            flat = self._flat_pair(job)
            if me != r:
                (sd,) = self._dev("outmask", self._meta(0, 1, n_in), kind="mask")
                zm = ring.add(flat.a if me == lo else flat.b, self._mask(sd, n_in, ring.mask))   # z_{r-1} + m
                if me == lo:        # holds (z_{r-1}, z_r)
                    c = eng.pack(ring.add(zm, flat.b))
                    (tag,) = self._dev("outmac", self._meta(0, n_in), c, kind="mac")
                    ep.send(names[r], "stamp/out'", c, tag)
                else:               # holds (z_{r+1}, z_{r-1})
                    (tag,) = self._dev("outmac", self._meta(0, n_in), eng.pack(flat.a), kind="mac")
                    ep.send(names[r], "stamp/out'/h", digest("stamp/out", zm), tag)
            else:                   # holds (z_r, z_{r+1})
                c, t_lo = ep.recv(names[lo], "stamp/out'", ArraySpec(eng.wire, (n_in,)), ArraySpec(np.uint8, (16,)))
                h, t_hi = ep.recv(names[hi], "stamp/out'/h", ArraySpec(np.uint8, (32,)), ArraySpec(np.uint8, (16,)))
                ep.require(np.array_equal(h, digest("stamp/out", ring.sub(c.astype(U64), flat.a))), "output-consistency",
                           None, "the two copies of the output step's masked component disagree")
                (y,) = self._dev("output", self._meta(0, 1), spec_bytes(job.spec), c, eng.pack(flat.b), t_lo, t_hi,
                                 kind="output")
        self.op += 1
        self.ctr += self._n_op
        return None if y is None else ring.reduce(y).reshape(oshape)

    def _recv_dup(self, first: int, second: int, tag: str, dtypes: list, n: int, check: str):
        """Receive step 2's message; malicious: the second holder's copy must be identical."""
        ep, names = self.eng.ep, self.eng.names
        specs = [ArraySpec(dt, (n,)) for dt in dtypes]
        got = ep.recv(names[first], tag, *specs)
        if self.eng.malicious:
            got2 = ep.recv(names[second], tag, *specs)
            ep.require(all(np.array_equal(a, b) for a, b in zip(got, got2)), check, None,
                       "the two copies of a masked share disagree")
        return [g.astype(U64) for g in got]

    # ---- preprocessing for the malicious multiplication check ---------------------------
    def triple(self, kind: str, attrs: dict, xs: tuple, ws: tuple, cs: tuple, a_id: str | None = None,
               b_id: str | None = None, a_known: bool = False, b_known: bool = False,
               a_seg: list | None = None) -> tuple[Pair | None, Pair | None, Pair]:
        """A replicated triple from the LTEEs: each LTEE derives the same random A, B,
        computes C = f(A, B) and releases its host's two components of each. Named
        operands (``a_id``/``b_id``) are shared with other triples; an operand the host
        already holds (``*_known``) is not sent again and comes back as None."""
        size = max(int(np.prod(s)) for s in (xs, ws, cs))
        self._n_op = SLOTS * size
        spec = {"kind": kind, "attrs": attrs, "x": list(xs), "w": list(ws), "c": list(cs),
                "a_id": a_id, "b_id": b_id, "a_known": a_known, "b_known": b_known}
        if a_seg is not None:     # an activation mask "act/<op>" (``StampBackend._act_setup``)
            spec["a_seg"] = a_seg
        before, bus0 = self.link.refresh_stats().copy(), self.link.meter.total
        a0, a1, b0, b1, c0, c1 = self._dev("triple", self._meta(0), spec_bytes(spec), kind="triple")
        self.triple_bus += self.link.meter.total - bus0
        self.triple_stats += self.link.refresh_stats() - before
        self.op += 1
        self.ctr += self._n_op
        a = None if a_known else Pair(a0.reshape(xs), a1.reshape(xs))
        b = None if b_known else Pair(b0.reshape(ws), b1.reshape(ws))
        return a, b, Pair(c0.reshape(cs), c1.reshape(cs))

    def operand(self, which: str, ident: str, shape: tuple, full: bool = False, seg: list | None = None):
        """This host's two components of a named triple operand (``ltee_device._operand``);
        ``full``: also the whole value (the input owner's own input mask only); ``seg``: the
        job segments of an activation mask "act/<op>"."""
        spec = {"which": which, f"{which}_id": ident, "shape": [int(d) for d in shape], "full": full}
        if seg is not None:
            spec["a_seg"] = seg
        before, bus0 = self.link.refresh_stats().copy(), self.link.meter.total
        got = self._dev("operand", self._meta(0), spec_bytes(spec), kind="triple")
        self.triple_bus += self.link.meter.total - bus0
        self.triple_stats += self.link.refresh_stats() - before
        pair = Pair(got[0].reshape(shape), got[1].reshape(shape))
        return (pair, got[2].reshape(shape)) if full else pair
