"""STAMP's backend for the graph executor: every non-linear step goes through the LTEE.

Semi-honest: a linear node's 3-out-of-3 product goes straight into the device path
(truncation, bias and the following ReLU / MaxPool / BatchNorm fused, [STAMP Protocol 5]);
two rounds for MatMul + non-linearity instead of at least three [STAMP 4.3].
Malicious: the product is re-shared, verified with an LTEE-made triple
(``Engine.reshare_verified``, checked by ``flush_checks`` before any reveal), then the
duplicated device path runs [STAMP Protocol 5 blue]; a device step whose result feeds
products only hands them their rho (``_act_plan``).
Semi-honest, a step not split across the batch whose result only products with a weight
take is evaluated by the model owner's LTEE, which keeps the real component; the next
product's terms are split so that the other two parties need nothing from it
(``_plan_held``; docs/protocols/stamp.md, "Fourth pass").
Batches are split across the three parties [STAMP 4.2]. The graph's last product, with nothing
but movement ops after it, is fused with the output opening (``product_output``): p1's
LTEE truncates the whole batch and returns the plaintext to p1 only.
Malicious products whose input will be shared as A + rho re-share f(A, W) early, with the
messages of the step that makes A known (``_premultiply``); independent products of one
input finish in one device operation (``products``); a residual Add and the non-linear ops
after a product run in its device chain (executor ``_residual_chain``).
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ProtocolError
from secinfer.ir.graph import Graph, Node
from secinfer.protocols.rep3 import kernels
from secinfer.protocols.rep3.engine import Engine
from secinfer.protocols.rep3.executor import LINEAR, run_graph
from secinfer.protocols.rep3.stacked import stack_weight, stacked_product
from secinfer.protocols.stamp.input_offline import InputPlan, half_product, plain_limbs, stacked_half
from secinfer.protocols.stamp.jobs import (RESHAPES, Job, activations, jobs as make_jobs, node_steps, output_of,
                                          split_batch, splittable)
from secinfer.protocols.stamp.nonlinear import MAX_JOBS, StampOps
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

class StampBackend:
    def __init__(self, eng: Engine, ops: StampOps, output_receiver: int | None = None,
                 premultiply: bool = True, first_leader: int = 0, owner: int | None = None) -> None:
        """``output_receiver``: the party that learns the graph's output; when set, the
        executor fuses the last product with the opening (``product_output``).
        ``premultiply`` (malicious): re-share f(A, W) of a product whose first operand will be
        shared as A + rho as soon as A is known (``_premultiply``).
        ``first_leader``: the leader of the first device operation that is not split across
        the batch; the next ones rotate from it (``_split``). A public schedule: which party
        leads or evaluates a job changes no message's content, only who sends it.
        ``owner`` (semi-honest): the model owner; an unsplit device operation whose result
        feeds only products with a weight is evaluated by its LTEE, which keeps the real
        component there (``_plan_held``)."""
        self.eng, self.ops = eng, ops
        self.output_receiver = output_receiver
        self.premultiply = premultiply
        self.fuse_residual = True   # executor: product -> Add(residual) -> non-linear ops in one step
        self.ring = eng.ring
        self._rot = first_leader % 3
        self.counts = {"device_calls": 0, "products": 0, "sigma_reused": 0, "rho_reused": 0, "output_fused": 0,
                       "rho_from_device": 0, "premultiplied": 0}
        self._wenv: dict[str, Pair] = {}          # weight -> its shares (products to premultiply)
        self._pre: dict[str, Pair | None] = {}    # product node -> re-shared f(A, W) (None: under way)
        self._input_nodes: list[Node] = []        # products of the input (``can_mask_input``)
        self._opening: dict[str, tuple] = {}      # activation -> (a id, A) of a rho being opened
        # malicious multiplication check: named triple operands whose masked opening is
        # shared by several products (``prepare``, ``product``)
        self._weights: dict[str, tuple[str, Pair, np.ndarray]] = {}   # weight -> (b id, B, sigma)
        self._acts: dict[str, tuple] = {}        # activation -> (a id, A, rho, job segments or None)
        self._uses: dict[str, int] = {}          # activation -> products left
        self._act_out: dict[str, tuple] = {}     # device-step output -> (activation, products, shape)
        self._stacked: dict[str, object] = {}    # semi-honest: weight -> its stacked operand (``precompute``)
        self.guard: dict | None = None           # the range guard's plan (``set_range_guard``)
        self._dry: dict | None = None            # tensor shapes while ``prefetch`` runs the graph dry
        self._input_plan: InputPlan | None = None   # first-layer halves prepared offline (``prepare_input``)
        # semi-honest, results held by the model owner (``_plan_held``)
        self.owner = None if eng.malicious else owner
        self._held_src: dict[str, str] = {}       # product node -> the device-step output it multiplies
        self._held_w: dict[str, tuple] = {}       # product node -> (this party's weight part, limbs, stacked)
        self._held: set = set()                   # device-step outputs whose real component p0 kept
        self.hold_batches = False                 # also hold batches (not split across the LTEEs)
        self.send_ahead = False                   # components on offline data sent ahead (``prefetch``)
        # semi-honest: this party's components of products that depend on offline data only,
        # computed by ``ahead``'s dry run and taken online instead of computed again (``_dry_product``)
        self._z_ahead: dict[str, np.ndarray] = {}
        self.warmed = False                       # ``warm`` ran the online steps before the "ready"
        # option stamp_online_plan (``online_plan``): while ``warm`` runs, each product's node and
        # where its local product came from; the schedule's state at the warm run's end
        self.trace: list | None = None
        self.warm_end: tuple | None = None
        self.plan_why = None                      # why ``online_plan.compile_plan`` gave no plan

    def precompute(self, graph: Graph, env: dict) -> None:
        """Semi-honest, offline: the weight's part of every local product, once per session
        (``rep3.stacked``: [w_p + w_{p+1} ; w_p] and its limbs), so that the online 3-out-of-3
        product is one ring product and adds no weight components. Local work, no message."""
        if self.eng.malicious:
            return
        for node in graph.nodes:
            if node.op not in LINEAR or len(node.inputs) < 2 or node.inputs[1] not in graph.weight_info:
                continue
            name = node.inputs[1]
            if name in self._stacked or name not in env:
                continue
            sw = stack_weight(node.op, node.attrs, self.ring, env[name])
            if sw is not None:
                self._stacked[name] = sw
        self._plan_held(graph)

    def _plan_held(self, graph: Graph) -> None:
        """Semi-honest, offline: the products whose first operand will be *held* -- made by a
        device step that is not split across the batch, and consumed (through
        order-preserving reshapes) by products with a stacked weight only. Such a step is
        evaluated by the model owner's LTEE (``_split``) and the real component of its
        result is not sent on (``Job.hold``): with e = owner, t = e + 1, i = e + 2, the
        result's components are h_e (pseudo-random, e and i hold it), h_t (the real one,
        at e only) and h_i (pseudo-random, at i and t). The nine terms f(h_j, w_k) of the
        next product are split as the first layer's are (``input_offline``): e takes
        f(h_e + h_t, W) with its own plaintext W, t f(h_i, w_t), i f(h_i, w_i + w_e) --
        the sum is f(h, W) bit for bit, and each component is masked by the LTEEs'
        zero-sharing before it leaves its party [STAMP Protocol 5]. t and i then need
        nothing from the step, so their components of the next product go out at once.
        Nothing is revealed that was not before (t no longer receives h_t)."""
        if self.owner is None or self.guard is not None:
            return
        cons = graph.consumers()
        prod = {o: nd for nd in graph.nodes for o in nd.outputs}
        outputs, inputs = set(graph.output_names), set(graph.input_names)
        me, ring, owner = self.eng.me, self.ring, self.owner
        for t, cs in cons.items():
            if t in graph.weight_info or t in inputs or t in outputs or not cs:
                continue
            if not all(c.op in ("Gemm", "MatMul", "Conv") and len(c.inputs) > 1 and c.inputs[0] == t
                       and c.inputs[1] != t and c.inputs[1] in self._stacked for c in cs):
                continue
            src = t
            while (src in prod and prod[src].op in RESHAPES and len(prod[src].inputs) == 1
                   and len(cons.get(prod[src].inputs[0], [])) == 1 and prod[src].inputs[0] not in outputs):
                src = prod[src].inputs[0]
            if src in inputs or src in graph.weight_info:
                continue
            for c in cs:
                sw = self._stacked[c.inputs[1]]
                if me == owner:       # its own model's weight, in the ring
                    w, limbs = plain_limbs(sw, ring.reduce(self.eng.cfg.encode(
                        np.asarray(graph.initializers[c.inputs[1]], np.float64))))
                else:                 # t: w_t (bottom half), i: w_i + w_e (top half)
                    w, limbs = stacked_half(sw, top=me == (owner + 2) % 3)
                self._held_src[c.name] = src
                self._held_w[c.name] = (w, limbs, sw)

    def _held_product(self, node: Node, x: Pair) -> np.ndarray | None:
        """This party's component of a product of a held result (``_plan_held``), or None."""
        src = self._held_src.get(node.name)
        if src is None or src not in self._held:
            return None
        w, limbs, sw = self._held_w[node.name]
        me, ring = self.eng.me, self.ring
        if me == self.owner:
            v = ring.add(x.a, x.b)        # h_e + h_t
        elif me == (self.owner + 1) % 3:
            v = x.b                       # h_i (h_t, x.a, is not here)
        else:
            v = x.a                       # h_i
        return half_product(ring, sw.f, sw.axis, v, w, limbs)

    def prepare_input(self, graph: Graph, owner: int) -> InputPlan | None:
        """Semi-honest, offline, input shared online: draw the input's pseudo-random
        components now and compute the input-independent half of every first-layer product
        with a stacked weight (``input_offline``: all of p2's component, half of p0's and
        p1's). The online phase then shares the input with ``InputPlan.share``."""
        if self.eng.malicious or len(graph.inputs) != 1:
            return None
        info = graph.inputs[0]
        plan = InputPlan(self.eng, owner, info.name, tuple(int(d) for d in info.shape))
        for node in graph.consumers().get(info.name, []):
            if node.op in LINEAR and len(node.inputs) > 1 and node.inputs[0] == info.name != node.inputs[1]:
                sw = self._stacked.get(node.inputs[1])
                if sw is not None:
                    w = None
                    if self.eng.me == (owner + 2) % 3:   # the model owner: its weight in the ring
                        w = self.ring.reduce(self.eng.cfg.encode(
                            np.asarray(graph.initializers[node.inputs[1]], np.float64)))
                    plan.add_product(node.name, sw, w, node.attrs if node.op == "Conv" else None)
        self._input_plan = plan
        return plan

    def prefetch(self, graph: Graph, env: dict) -> int:
        """Semi-honest, before the online phase: every device operation's seed requests --
        the masks a non-evaluator adds to what it sends, the output zero-shares, the output
        step's masks -- fetched from the LTEE ahead of time and the masks expanded
        (``StampOps.plan``/``prefetch``, ``ltee_device.cmd_prefetch``). They depend on the
        model, the batch size and the public schedule only, so a dry run of the graph on
        zeros (no message, no device call, no product computed) lists them. The online phase
        then calls the device only to evaluate. Returns the requests served."""
        if self.eng.malicious:
            return 0
        denv = dict(env)
        for info in graph.inputs:
            z = np.zeros(tuple(int(d) for d in info.shape), dtype=np.uint64)
            denv[info.name] = Pair(z, z)
        rot, counts, held = self._rot, dict(self.counts), set(self._held)
        self.ops.evaluator_seeds = True   # (the dry run and the online phase ask alike)
        self._dry = graph.shapes
        try:
            self.ops.plan(lambda: run_graph(self.ring, self.eng.me, self, graph, denv))
        finally:
            self._dry, self._rot, self.counts, self._held = None, rot, dict(counts), set(held)
        served = self.ops.prefetch()
        if self.send_ahead and self.guard is None:
            # the components that depend on offline data only, computed with the prefetched
            # seeds by a second dry run and sent now (``StampOps.ahead``) [docs: stamp.md]
            self._dry = graph.shapes
            try:
                self.ops.ahead(lambda: run_graph(self.ring, self.eng.me, self, graph, dict(denv)))
            finally:
                self._dry, self._rot, self.counts, self._held = None, rot, dict(counts), set(held)
            self.ops.exchange_ahead()
            # the online frames left, declared to the transport (frame templates, issue #23)
            self.ops.declare_online()
            if self._input_plan is not None:
                self._input_plan.declare()
        return served

    def _early_from(self, node: Node) -> frozenset:
        """Semi-honest: the parties whose 3-out-of-3 component of product ``node`` depends on
        offline data only, so it is sent ahead (``StampOps.ahead``): every party but the
        model owner for a first-layer product prepared offline (``input_offline``: p1's and
        p2's terms take the pseudo-random input components only) or a product of a held
        result (``_plan_held``: t's and i's terms take h_i, from the LTEEs' seeds). Decided
        from the public graph and schedule, alike at every party."""
        if not self.send_ahead or self.eng.malicious or self.guard is not None:
            return frozenset()
        plan = self._input_plan
        if plan is not None and node.name in plan.halves:
            return frozenset(p for p in range(3) if p != (plan.owner + 2) % 3)
        src = self._held_src.get(node.name)
        if self.owner is not None and src is not None and src in self._held:
            return frozenset(p for p in range(3) if p != self.owner)
        return frozenset()

    def _dry_product(self, node: Node, x: Pair) -> np.ndarray | None:
        """In ``StampOps.ahead``'s dry run: this party's real component of ``node`` when it
        is sent ahead (``_early_from``), else None (zeros do)."""
        if not self.ops._early_run or self.eng.me not in self._early_from(node):
            return None
        plan = self._input_plan
        if plan is not None and node.name in plan.halves:
            h = plan.halves[node.name]
            return h.part if h.w is None else None
        z = self._held_product(node, x)
        if z is not None:      # the same value online (h_i from the seeds served ahead): kept
            self._z_ahead[node.name] = z
        return z

    def warm(self, graph: Graph, env: dict, scratch: np.ndarray | None) -> bool:
        """Option ``stamp_warm_online`` (semi-honest, after ``prefetch``): this party's online
        steps run once, right before the "ready", on scratch inputs of the real shapes
        (``scratch``: the client's encoded all-zero input; the others receive zeros) --
        the input sharing, every product and device step, the output step -- through
        ``StampOps.warm``: nothing sent, no device request, no seed, mask, counter or kept
        component taken, the results discarded; the schedule's state is restored. The
        query's first call of each numpy function and code path is then not its first in
        this process (issue #23; ASTRA's ``warm_online``). Returns whether it ran to the end."""
        plan = self._input_plan
        if self.eng.malicious or plan is None or self.guard is not None:
            return False
        rot, counts, held, x0 = self._rot, dict(self.counts), set(self._held), plan.x
        denv = dict(env)

        def steps():
            denv[plan.name] = plan.share(scratch if self.eng.me == plan.owner else None, warm=True)
            run_graph(self.ring, self.eng.me, self, graph, denv)
            self.warm_end = (dict(self.counts), self._rot, set(self._held))
        try:
            self.warmed = self.ops.warm(steps)
        finally:
            self._rot, self.counts, self._held, plan.x = rot, counts, held, x0
        return self.warmed

    def set_range_guard(self, plan: dict) -> None:
        """Switch on the range guard (docs/protocols/stamp.md, "Range guard"): the device step
        of every product in ``plan["check"]`` first compares its sum with the shadow's
        (``kernels.shadow_check``), and the device step making a tensor in ``plan["make"]``
        appends its shadow rows (``kernels.shadow_make``): between the two, an activation is
        held as [h; floor(h / 2^s)] (twice the rows), and the product runs on both. Those
        steps are not split across the batch and (malicious) take no activation mask."""
        self.guard = plan

    def _guarded(self, node: Node | None, last: str | None, steps: list, out_shape: tuple) -> tuple:
        """(steps, out_shape, guarded?) with the range guard's steps added for this device step."""
        g = self.guard
        if g is None:
            return steps, out_shape, False
        hit = False
        if node is not None and node.name in g["check"]:
            steps = [{"op": "shadow-check", "s": int(g["s"]), "e": int(g["check"][node.name]),
                      "layer": node.name}] + steps
            hit = True
        if last is not None and last in g["make"]:
            steps = steps + [{"op": "shadow-make", "s": int(g["s"]), "a1": int(g["make"][last])}]
            out_shape = (2 * int(out_shape[0]),) + tuple(out_shape[1:])
            hit = True
        return steps, out_shape, hit

    def prepare(self, graph: Graph, env: dict) -> None:
        """Malicious, offline: for every weight tensor that is the second operand of a
        product, get the LTEEs' named operand B and open sigma = W - B once (one round for
        all of them). Every product with that weight then uses a triple (A_j, B, A_j B) with
        a fresh A_j and skips opening sigma (``Engine.reshare_verified``). B is uniform and
        known to no party, so sigma reveals nothing about W; W is fixed, so it is the same
        sigma every time. Activations that are the first operand of several products
        (attention's Q, K, V from one input) share their A and rho likewise, and an
        activation made by a device step that feeds products only gets its A and rho from
        the LTEEs of that step (``_act_plan``)."""
        names, first = [], {}
        for node in graph.nodes:
            if node.op not in LINEAR or len(node.inputs) < 2:
                continue
            if node.inputs[1] in graph.weight_info and node.inputs[1] not in names:
                names.append(node.inputs[1])
            if node.inputs[0] not in graph.weight_info:
                first[node.inputs[0]] = first.get(node.inputs[0], 0) + 1
        self._uses = {k: v for k, v in first.items() if v > 1}
        self._act_out = activations(graph)
        bs = [self.ops.operand("b", f"w/{name}", env[name].a.shape) for name in names]
        sigmas = self.eng.open_many([rss.sub(self.ring, env[n], b) for n, b in zip(names, bs)], "rss/sigma")
        self._weights = {n: (f"w/{n}", b, s) for n, b, s in zip(names, bs, sigmas)}
        self._wenv = {n: env[n] for n in names}

    # ---- activations whose rho comes from the LTEEs (malicious) -------------------------
    def _act_plan(self, last: str, ranges: list, leaders: list, out_shape: tuple, path: str):
        """Malicious rss step whose output ``last`` feeds products (``_activations``): their
        activation mask A is this device operation's "act/<op>" (one segment per job,
        ``ltee_device._act_comps``). Returns (name, uses, shape, segments, products to
        premultiply) or None; ``_act_make`` then gets this host's two components of A."""
        info = self._act_out.get(last)
        if info is None or path != "rss" or not self.eng.malicious:
            return None
        name, uses, shape, nodes = info
        n = int(np.prod(out_shape))
        if int(np.prod(shape)) != n or (len(ranges) > 1 and (not shape or shape[0] != out_shape[0])):
            return None
        per_row = n // max(1, int(out_shape[0])) if len(ranges) > 1 else 0
        seg = [[c, ld, (hi - lo) * per_row if len(ranges) > 1 else n]
               for c, ((lo, hi), ld) in enumerate(zip(ranges, leaders))]
        return name, uses, shape, seg, self._premultipliable(nodes, shape)

    def _act_make(self, plan, op_at_run: int, first_sub: int = 0):
        """A of ``_act_plan`` for the device operation numbered ``op_at_run`` (after the
        triples of the premultiplied products, each a device operation of its own), its
        segments in the operation's slots from ``first_sub``; premultiplies."""
        name, uses, shape, seg, pre = plan
        seg = [[sub + first_sub, ld, k] for sub, ld, k in seg]
        a_id = f"act/{op_at_run}"
        a = self.ops.operand("a", a_id, shape, seg=seg)
        self._premultiply(pre, a_id, a, seg)
        return name, uses, a_id, seg, a

    # ---- premultiplied products (malicious) ---------------------------------------------
    def _premultipliable(self, nodes: list, shape: tuple) -> list:
        """The products among ``nodes`` (consumers of an activation of ``shape`` that will be
        shared as A + rho) whose second operand is a weight with its sigma opened."""
        if not (self.premultiply and self.eng.malicious):
            return []
        out = []
        for nd in nodes:
            wname = nd.inputs[1] if len(nd.inputs) > 1 else None
            if wname in self._weights and wname in self._wenv and nd.name not in self._pre:
                out.append(nd)
        return out

    def _premultiply(self, nodes: list, a_id: str, a: Pair, seg: list | None) -> None:
        """For each product z = f(x, W) of ``nodes``, where x will be A + rho (A this host's
        two components ``a`` of the named mask ``a_id``, rho public once known), re-share
        f(A, W) now -- it does not depend on x -- and check it with the LTEEs' triple
        (A, B, C = f(A, B)): delta = z_AW - C - f(A, sigma) (rho = 0; sigma = W - B opened
        offline). The message is sent before this host's next sends and received with them
        (``Engine.reshare_send``, ``recv_deferred``): no round of its own. When x is there,
        z = z_AW + f(rho, W) is local (``_verified``), exactly f(x, W): the product costs no
        round and opens nothing [docs: stamp.md, "Premultiplied products"]."""
        eng, ring = self.eng, self.ring
        for nd in nodes:
            wname = nd.inputs[1]
            b_id, bmask, sigma = self._weights[wname]
            w = self._wenv[wname]
            f = kernels.bilinear(nd.op, nd.attrs, ring)
            z3 = rss.bilinear_local(ring, f, a, w)
            _, _, c = self.ops.triple(nd.op, nd.attrs, a.a.shape, w.a.shape, z3.shape, a_id=a_id, b_id=b_id,
                                      a_known=True, b_known=True, a_seg=seg)
            self._pre[nd.name] = None

            def on_recv(z, name=nd.name, f=f, c=c, bmask=bmask, sigma=sigma):
                eng.queue_delta(f, z, (a, bmask, c), None, sigma)
                self._pre[name] = z
            eng.reshare_send(z3, "stamp/premul", on_recv)
            self.counts["premultiplied"] += 1

    # ---- job construction ------------------------------------------------------------
    def _split(self, data, out_shape: tuple, split: bool, owner_eval: bool = False):
        """(row ranges, leaders) of a device operation's jobs [STAMP 4.2]; unsplit, the leader
        rotates, or (``owner_eval``) is the one whose evaluator is the model owner."""
        n = (data.a if isinstance(data, Pair) else data).shape[0] if len(out_shape) else 1
        # the part whose evaluator is the output party (leader r - 1) is the lighter one
        light = None if self.output_receiver is None else (self.output_receiver - 1) % 3
        parts = [(c, r) for c, r in enumerate(split_batch(n, light=light)) if r[1] > r[0]] if split and n >= 2 else []
        if len(parts) > 1:
            ranges, leaders = [r for _, r in parts], [c for c, _ in parts]
        else:
            ranges, leaders = [(0, n)], [(self.owner + 2) % 3 if owner_eval else self._rot % 3]
        if len(ranges) == 1:
            self._rot += 1
        return ranges, leaders

    def _collect(self, jobs: list, outs: list, act) -> Pair:
        if act is not None:
            name, uses, a_id, seg, a = act
            rho = np.concatenate([j.rho.reshape(-1) for j in jobs]).reshape(a.a.shape)
            self._acts[name] = (a_id, a, rho, seg)
            self._uses[name] = uses
            self.counts["rho_from_device"] += 1
        if len(outs) == 1:
            return outs[0]
        return Pair(np.concatenate([o.a for o in outs]), np.concatenate([o.b for o in outs]))

    def _run_many(self, tasks: list, path: str) -> list[Pair]:
        """Device operation(s) for ``tasks`` = [(data, steps, params, out_shape, split, last,
        batched)]: all their jobs in one operation of at most ``nonlinear.MAX_JOBS`` jobs
        (two rounds for all), in order."""
        plans = []
        # one unsplit step whose result only products with a weight take: held (``_plan_held``)
        hold = (len(tasks) == 1 and path in ("3of3", "rss") and self.owner is not None and self.guard is None
                and tasks[0][5] is not None and tasks[0][5] in self._held_src.values())
        for data, steps, params, out_shape, split, last, batched in (tk[:7] for tk in tasks):
            ranges, leaders = self._split(data, out_shape, split and not (hold and self.hold_batches), owner_eval=hold)
            ap = self._act_plan(last, ranges, leaders, out_shape, path) if last is not None else None
            plans.append((ranges, leaders, ap))
        op_at_run = self.ops.op + sum(len(ap[4]) for _, _, ap in plans if ap is not None)
        results, batch, sub = [], [], 0
        for task, (ranges, leaders, ap) in zip(tasks, plans):
            data, steps, params, out_shape, split, last, batched = task[:7]
            if sub + len(ranges) > MAX_JOBS:
                raise ProtocolError("too many jobs for one device operation")
            act = self._act_make(ap, op_at_run, sub) if ap is not None else None
            jobs = make_jobs(data, steps, params, out_shape, ranges, leaders, batched, act)
            for j in jobs:
                j.early = task[7] if len(task) > 7 else frozenset()
            if hold and len(jobs) == 1:
                jobs[0].hold = True
                self._held.add(last)
            batch.append((jobs, act))
            sub += len(jobs)
        alljobs = [j for jobs, _ in batch for j in jobs]
        outs = self.ops.run(alljobs, path)
        self.counts["device_calls"] += 1
        k = 0
        for jobs, act in batch:
            results.append(self._collect(jobs, outs[k:k + len(jobs)], act))
            k += len(jobs)
        return results

    def _run(self, data, steps: list, params: list[Pair], out_shape: tuple, path: str, split: bool,
             last: str | None = None, batched: set | None = None) -> Pair:
        return self._run_many([(data, steps, params, out_shape, split, last, batched or set())], path)[0]

    # ---- backend interface -------------------------------------------------------------
    def _local_product(self, node: Node, x: Pair, w: Pair, bias: Pair | None):
        """The local 3-out-of-3 product [STAMP 3.2] and the device steps that finish it
        (z3 None for a premultiplied product, ``_verified`` finishes it)."""
        f = kernels.bilinear(node.op, node.attrs, self.ring)
        sw = self._stacked.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if node.name in self._pre:
            z3 = None
        elif self._dry is not None:               # dry run (``prefetch``): the shape is enough
            z3 = self._dry_product(node, x)       # (``ahead``: what is sent ahead is computed)
            if z3 is None:
                shp = tuple(int(d) for d in self._dry[node.outputs[0]])   # (rows: the range guard doubles them)
                z3 = np.zeros((x.a.shape[0],) + shp[1:] if shp else shp, dtype=np.uint64)
        elif (z := self.ops.take(self._z_ahead, node.name)) is not None:
            z3, src = z, "ahead"                  # computed by ``ahead``'s dry run (``_dry_product``)
        elif self._input_plan is not None and (z := self._input_plan.product(node.name, x)) is not None:
            z3, src = z, "input"                  # the input-independent half prepared offline
        elif (zh := self._held_product(node, x)) is not None:
            z3, src = zh, "held"                  # a held result: the owner-split terms
        elif sw is not None and sw.source is w:   # the weight's part prepared offline
            z3, src = stacked_product(self.ring, sw, x), "stacked"
        else:
            z3, src = rss.bilinear_local(self.ring, f, x, w), "local"
        if self.trace is not None and self.ops.warming and self._dry is None and node.name not in self._pre:
            self.trace.append((node.name, src))   # (``online_plan.compile_plan`` reads it)
        steps = [{"op": "trunc"}]
        plist: list[Pair] = []
        if bias is not None:
            steps.append({"op": "bias", "axis": 1 if node.op == "Conv" else -1, "param": 0})
            plist.append(bias)
        self.counts["products"] += 1
        return f, z3, steps, plist

    def product_output(self, node: Node, x: Pair, w: Pair, bias: Pair | None, out_shape: tuple) -> np.ndarray | None:
        """The graph's last product, with no non-linearity after it, fused with the opening
        to ``output_receiver`` (``StampOps.output``): its exact truncation and bias run in
        the receiver's LTEE, which returns the plaintext output to its own host (returned
        there; None at the other parties). Semi-honest: one round from the local product.
        Malicious: the product is re-shared and verified first (``_verified``), and every
        pending check is completed (``Engine.flush_checks``) before anything goes towards
        the receiver: three rounds instead of five (re-share, device path 2, check,
        opening)."""
        eng = self.eng
        f, z3, steps, plist = self._local_product(node, x, w, bias)
        steps, _, _ = self._guarded(node, None, steps, out_shape)
        zshape = z3.shape if z3 is not None else self._pre_shape(node)
        spec = {"shape": [int(d) for d in zshape], "out_shape": [int(d) for d in out_shape],
                "params": [[int(d) for d in p.a.shape] for p in plist], "steps": steps}
        self.counts["device_calls"] += 1
        self.counts["output_fused"] += 1
        r = self.output_receiver
        if r is None:
            raise ProtocolError("no output receiver set for the fused output step")
        if not eng.malicious:
            job = Job(r, spec, z3, plist)
            job.early = self._early_from(node)
            return self.ops.output(job, r)
        z = self._verified(node, f, x, w, z3)
        eng.flush_checks()   # [STAMP Protocol 5 step 1, malicious]: verified before it leaves
        return self.ops.output(Job(r, spec, z, plist), r)

    def _product_task(self, node: Node, x: Pair, w: Pair, bias: Pair | None, chain: list[Node],
                      params: list[list[Pair]], out_shape: tuple) -> tuple:
        """The local product (malicious: re-shared and verified, ``_verified``) and the device
        task that finishes it: truncation, bias, the fused chain."""
        f, z3, steps, plist = self._local_product(node, x, w, bias)
        nsteps, nparams = node_steps(chain, len(plist), params)
        # a residual (Add in the chain, executor ``_residual_chain``) is cut by rows like the data
        batched = {i for st in nsteps if st["node"]["op"] == "Add" for i in st["params"]}
        steps += nsteps
        plist += nparams
        zshape = z3.shape if z3 is not None else self._pre_shape(node)
        steps, out_shape, guarded = self._guarded(node, output_of((chain or [node])[-1]), steps, out_shape)
        split = (splittable(chain) and len(out_shape) >= 1 and len(zshape) >= 1
                 and zshape[0] == out_shape[0] and not guarded)
        if not self.eng.malicious:   # (``last``: a held result, ``_run_many``; sent ahead: not with a
            # chain parameter, e.g. a residual, which is not offline data)
            last = None if guarded or any(c.op == "Mul" for c in chain) else output_of((chain or [node])[-1])
            return (z3, steps, plist, out_shape, split, last, batched,
                    frozenset() if nparams else self._early_from(node))
        started = self._verify_start(node, f, x, w, z3)   # finished by ``products``
        last = None if guarded or any(c.op == "Mul" for c in chain) else output_of((chain or [node])[-1])
        return (started, steps, plist, out_shape, split, last, batched)

    def product(self, node: Node, x: Pair, w: Pair, bias: Pair | None, chain: list[Node],
                params: list[list[Pair]], out_shape: tuple) -> Pair:
        return self.products([(node, x, w, bias, chain, params, out_shape)])[0]

    def products(self, items: list[tuple]) -> list[Pair]:
        """Independent products (``executor.product_siblings``: attention's Q, K, V of one input),
        each (node, x, w, bias, chain, params, out_shape), finished by ONE device operation:
        their jobs run in lockstep (two rounds for all, instead of two each). Malicious: their
        verified re-shares (those not premultiplied) go out together, one round for all."""
        tasks = [self._product_task(*it) for it in items]
        if self.eng.malicious:   # all re-shares sent, then all received: one round for the group
            tasks = [(self._verify_finish(t[0]),) + tuple(t[1:]) for t in tasks]
        out = []
        for k in range(0, len(tasks), max(1, MAX_JOBS // 3)):
            out += self._run_many(tasks[k:k + max(1, MAX_JOBS // 3)], "rss" if self.eng.malicious else "3of3")
        return out

    def can_mask_input(self, graph: Graph, name: str) -> int:
        """Malicious: the number of products that take input ``name`` as their first
        operand, if every consumer is such a product (then ``masked_input`` applies), else 0."""
        cons = graph.consumers().get(name, [])
        if not self.eng.malicious or name in graph.output_names or not cons:
            return 0
        ok = all(c.op in LINEAR and len(c.inputs) > 1 and c.inputs[0] == name and c.inputs[1] != name
                 for c in cons)
        self._input_nodes = list(cons) if ok else []
        return len(cons) if ok else 0

    def masked_input(self, owner: int, x: np.ndarray | None, shape: tuple, name: str, products: int) -> Pair:
        """Malicious input sharing through the first product's verification operand A: the
        owner's LTEE gives its host the whole A (only for an ``in<owner>/`` name), the owner
        sends rho = X - A to the two others, and X is shared as rho + A. rho is exactly what
        the first product's check would open (``Engine.reshare_verified``), so input sharing
        and that opening cost 2n ring elements instead of n + 3n. The two receivers compare
        hashes of rho before anything is revealed (``input-consistency``: one of them
        sends the hash, the other compares it before the sender's next message); A is uniform and
        unknown to them, so rho hides X."""
        eng, ring = self.eng, self.ring
        a_id = f"in{owner}/{name}"
        n = int(np.prod(shape))
        pre = self._premultipliable(self._input_nodes, tuple(shape))
        if eng.me == owner:
            a, whole = self.ops.operand("a", a_id, shape, full=True)
            if x is None or tuple(x.shape) != tuple(shape):
                raise ProtocolError(f"input owner needs an array of shape {shape}")
            rho = ring.sub(ring.reduce(np.asarray(x, np.uint64)), whole)
            for p in ((owner + 1) % 3, (owner + 2) % 3):
                eng.send_ring(p, "stamp/input-rho", rho)
            self._premultiply(pre, a_id, a, None)      # travels with rho
        else:
            a = self.ops.operand("a", a_id, shape)
            self._premultiply(pre, a_id, a, None)      # f(A, W) needs no rho: sent first
            (rho,) = eng.recv_ring(owner, "stamp/input-rho", n)
            rho = rho.reshape(shape)
            # one receiver tells the other the hash of its copy; checked before the
            # sender's next message is received (``Engine.expect_hash``)
            first, second = (owner + 1) % 3, (owner + 2) % 3
            if eng.me == first:
                eng.send_hash(second, "stamp/input-rho/h", rho)
            else:
                eng.expect_hash(first, "stamp/input-rho/h", rho, "input-consistency")
        eng.recv_deferred()
        self._acts[name] = (a_id, a, rho, None)
        self._uses[name] = products
        return rss.add_public(ring, eng.me, a, rho)

    def _verified(self, node: Node, f, x: Pair, w: Pair, z3: np.ndarray) -> Pair:
        """Reshare the product and queue its check, sharing sigma (weights) and rho
        (activations with several products) as set up by ``prepare``."""
        return self._verify_finish(self._verify_start(node, f, x, w, z3))

    def _verify_start(self, node: Node, f, x: Pair, w: Pair, z3: np.ndarray | None) -> tuple:
        """The sending half of ``_verified`` (``Engine.reshare_verified_send``): several
        products started before any is finished re-share in one round (``products``). A
        product of an activation whose rho an earlier, unfinished one of the group opens
        takes that one's A (named) and, when finished, its rho."""
        seq = self.counts["products"]
        wk = self._weights.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if wk is not None and wk[1].a.shape != w.a.shape:
            wk = None
        xname = node.inputs[0] if node.inputs else None
        xk = self._acts.get(xname) if xname is not None else None
        if xk is not None and xk[1].a.shape != x.a.shape:
            xk = None
        if node.name in self._pre:
            if xk is not None and wk is not None:
                return ("done", self._finish_premultiplied(node, f, xname, xk, w))
            # not as planned (cannot happen with the executor's graphs): the premultiplied
            # re-share stays checked, the product is made the ordinary way
            self._pre_shape(node)
            self._pre.pop(node.name)
            z3 = rss.bilinear_local(self.ring, f, x, w)
        shared = self._opening.get(xname) if xk is None and xname in self._uses else None
        if shared is not None and shared[1].a.shape != x.a.shape:
            shared = None
        known = xk if xk is not None else shared
        a_id = known[0] if known is not None else f"x/{seq}"
        a, b, c = self.ops.triple(node.op, node.attrs, x.a.shape, w.a.shape, z3.shape, a_id=a_id,
                                  b_id=None if wk is None else wk[0], a_known=known is not None,
                                  b_known=wk is not None, a_seg=None if xk is None else xk[3])
        a = a if known is None else known[1]
        b = b if wk is None else wk[1]
        h = self.eng.reshare_verified_send(x, w, z3, (a, b, c), open_rho=known is None, open_sigma=wk is None)
        if known is None and xname in self._uses:
            self._opening[xname] = (a_id, a)
        return ("sent", node, f, xname, xk, shared, wk, a_id, a, h)

    def _verify_finish(self, st: tuple) -> Pair:
        if st[0] == "done":
            return st[1]
        _, node, f, xname, xk, shared, wk, a_id, a, h = st
        rho = xk[2] if xk is not None else (self._acts[xname][2] if shared is not None else None)
        z, rho = self.eng.reshare_verified_recv(h, f, rho=rho, sigma=None if wk is None else wk[2])
        self.counts["sigma_reused"] += wk is not None
        self.counts["rho_reused"] += xk is not None or shared is not None
        if xname in self._uses:
            if xk is None and shared is None:
                self._opening.pop(xname, None)
            self._uses[xname] -= 1
            if self._uses[xname] <= 0:
                self._acts.pop(xname, None)
                del self._uses[xname]
            elif xk is None:
                self._acts[xname] = (a_id, a, rho, None)
        return z

    def _pre_shape(self, node: Node) -> tuple:
        """Shape of a premultiplied product's re-shared f(A, W) (received now if need be)."""
        z = self._pre.get(node.name)
        if z is None:
            self.eng.recv_deferred()
            z = self._pre.get(node.name)
        if z is None:
            raise ProtocolError(f"premultiplied product {node.name!r} has no re-shared f(A, W)")
        return z.a.shape

    def _finish_premultiplied(self, node: Node, f, xname: str, xk: tuple, w: Pair) -> Pair:
        """z = z_AW + f(rho, W): x = A + rho, z_AW the re-shared, checked f(A, W)
        (``_premultiply``); f(rho, W) of the public rho is local and exact."""
        ring = self.ring
        self._pre_shape(node)
        zaw = self._pre.pop(node.name)
        rho = xk[2]
        z = rss.add(ring, zaw, Pair(ring.reduce(f(rho, w.a)), ring.reduce(f(rho, w.b))))
        self.counts["sigma_reused"] += 1
        self.counts["rho_reused"] += 1
        self._uses[xname] -= 1
        if self._uses[xname] <= 0:
            self._acts.pop(xname, None)
            del self._uses[xname]
        return z

    def chain(self, x: Pair, nodes: list[Node], params: list[list[Pair]], out_shape: tuple) -> Pair:
        steps, plist = node_steps(nodes, 0, params)
        last = output_of(nodes[-1]) if nodes else None
        steps, out_shape, guarded = self._guarded(None, last, steps, out_shape)
        return self._run(x, steps, plist, out_shape, "rss", splittable(nodes) and x.a.ndim >= 1 and not guarded,
                         None if guarded else last)

    def softmax(self, x: Pair, node: Node) -> Pair:
        axis = int(node.attrs.get("axis", -1)) % x.a.ndim
        perm = None
        if axis != x.a.ndim - 1:
            perm = [i for i in range(x.a.ndim) if i != axis] + [axis]
            x = rss.apply(x, lambda v: np.ascontiguousarray(np.transpose(v, perm)))
        shp = x.a.shape
        flat = rss.apply(x, lambda v: v.reshape(-1, shp[-1]))
        y = self._run(flat, [{"op": "softmax"}], [], flat.a.shape, "exp", True)
        y = rss.apply(y, lambda v: v.reshape(shp))
        if perm is not None:
            inv = list(np.argsort(perm))
            y = rss.apply(y, lambda v: np.ascontiguousarray(np.transpose(v, inv)))
        return y
