"""Semi-honest STAMP: a party's online steps compiled offline into a flat list (issue #23).

After the warm run (``StampBackend.warm``, option ``stamp_warm_online``) every step of the
online phase is known: the graph's order, each product's node and where its local product
comes from, each device operation's jobs, specs, counters, prefetched seeds and the
messages sent ahead. ``compile_plan`` turns what the warm run traced (``StampOps.trace``,
``StampBackend.trace``) into one ``OnlinePlan`` per party: a list of steps with everything
that does not depend on the query fixed -- the spec bytes, the device request's meta, the
evaluator / leader / third party role, the constant tail of each job's data (the bias), the
mark strings -- so that the online phase walks the list: no graph walk, no job building, no
spec validation or comparison, no seed-request signature.

What a step computes is what the graph executor, ``StampBackend`` and ``StampOps.run`` /
``output`` compute, through the same methods for anything that touches a message, a device
request, a seed or a component kept from the offline phase (``_others``, ``_comp``, ``_dev``,
``_send``, ``_recv``, ``InputPlan.share``/``product``, ``_held_product``): the messages, their
order and bytes, the device requests and the outputs are those of the unplanned path (tests
compare them). The plan is compiled only for the case it covers -- semi-honest, the input
shared online with ``input_offline``, the components sent ahead, no range guard, a chain of
products with weights (each taking the previous result, through data movements), every device
operation one 3-out-of-3 job, the last product fused with the opening -- and checked against
the live state before the online phase uses it (``ready``); anything else runs the unplanned
path. Malicious runs never use it (``compile_plan`` returns None): none of their checks moves.
"""

from __future__ import annotations

import numpy as np

from secinfer.ir.movement import MOVEMENT
from secinfer.protocols.rep3.executor import plan_product, product_siblings
from secinfer.protocols.rep3.stacked import stacked_product
from secinfer.protocols.stamp.ltee import spec_bytes
from secinfer.protocols.stamp.nonlinear import seed_signature
from secinfer.sharing.replicated import Pair

U64 = np.uint64
_PRODUCTS = ("Gemm", "MatMul", "Conv")


class _Step:
    """One product (``kind`` "product": its device operation; "output": fused with the
    opening) or one data movement ("move")."""

    __slots__ = ("kind", "node", "src", "mark", "tail", "op", "ctr", "n_op", "i", "e", "t", "hold", "sent",
                 "got", "n_in", "n_out", "oshape", "meta", "spec", "moves", "last")

    def __init__(self, kind: str, node, **kw) -> None:
        self.kind, self.node = kind, node
        for k in self.__slots__[2:]:
            setattr(self, k, kw.get(k))


class OnlinePlan:
    """A party's compiled online phase (``compile_plan``); ``ready`` then ``run``, once."""

    def __init__(self, backend, steps: list, start: tuple, end: tuple, mask) -> None:
        self.be, self.ops, self.eng = backend, backend.ops, backend.eng
        self.steps, self.start, self.end, self.mask = steps, start, end, mask
        self.used = False

    def _add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a + b mod 2^k (k <= 64; uint64 arrays wrap mod 2^64, a multiple of 2^k)."""
        out = np.add(a, b)
        return np.bitwise_and(out, self.mask, out=out)

    def ready(self, x: np.ndarray | None) -> bool:
        """Whether the live state is the one the plan was compiled for: the operation counters,
        the schedule, the prefetched seeds and kept components it takes, the input's shape.
        False (the unplanned path runs) if anything moved; nothing is changed here."""
        be, ops = self.be, self.ops
        ip = be._input_plan
        if self.used or ip is None or (ops.op, ops.ctr, be._rot) != self.start[:3] or be._held != self.start[3]:
            return False
        if (x is None) != (self.eng.me != ip.owner) or (x is not None and tuple(x.shape) != ip.shape):
            return False
        for st in self.steps:
            if st.kind == "move":
                continue
            if st.got is not None and ops._ahead.get(st.op) is not st.got:
                return False
            if st.sent is not None and st.sent not in ops._sent_ahead:
                return False
            if st.src[0] == "ahead" and be._z_ahead.get(st.node.name) is not st.src[1]:
                return False
        return True

    def run(self, x: np.ndarray | None, mark=None) -> np.ndarray | None:
        """The online phase: the input shared, every step in order; the output at its
        receiver (None elsewhere). The counters and the schedule end as the unplanned path's."""
        be, ops, eng = self.be, self.ops, self.eng
        self.used = True
        ip = be._input_plan
        v = ip.share(x)
        y = None
        for st in self.steps:
            if st.kind == "move":
                node = st.node
                v = Pair(np.asarray(MOVEMENT[node.op](node, [v.a])[0], U64),
                         np.asarray(MOVEMENT[node.op](node, [v.b])[0], U64))
                continue
            if mark is not None:
                mark(st.mark)
            src = st.src
            if src[0] == "ahead":
                z3 = be._z_ahead.pop(st.node.name)
            elif src[0] == "input":
                z3 = ip.product(st.node.name, v)
            elif src[0] == "held":
                z3 = be._held_product(st.node, v)
            else:                         # the weight's part prepared offline (``rep3.stacked``)
                z3 = stacked_product(be.ring, src[1], v)
            flat = z3.reshape(-1) if st.tail is None else np.concatenate((z3.reshape(-1), st.tail))
            ops.op, ops.ctr, ops._n_op = st.op, st.ctr, st.n_op
            if st.kind == "product":
                v = self._device(st, flat)
                if st.hold:               # (``StampBackend._run_many``: a held result)
                    be._held.add(st.last)
            else:
                y = self._output(st, flat)
                for mv in st.moves:
                    y = None if y is None else np.asarray(MOVEMENT[mv.op](mv, [y])[0], U64)
            ops.op, ops.ctr = st.op + 1, st.ctr + st.n_op
        counts, be._rot, held = self.end[0]
        be.counts, be._held = dict(counts), set(held)
        ops.op, ops.ctr, ops._n_op = self.end[1]
        return y

    def _device(self, st: _Step, flat: np.ndarray) -> Pair:
        """``StampOps.run`` of one 3-out-of-3 job, semi-honest (Protocol 5)."""
        ops, eng = self.ops, self.eng
        me = eng.me
        seeds = ops._ahead.pop(st.op)[1] if st.got is not None else {}
        if me != st.e:
            if st.sent is not None:
                ops._sent_ahead.discard(st.sent)        # (sent before the online phase)
            else:
                (sd,) = seeds[(0, "x")]
                ops._send(st.e, "stamp/x'", self._add(flat, ops._comp(sd, me, st.n_in)))
        eng.recv_deferred()
        if me == st.e:
            s = self._add(ops._others(0, (st.i, st.t), "stamp/x'", st.n_in), flat)
            sd, zb = ops._dev("eval", st.meta, st.spec, eng.pack(s), kind="eval")
            res = Pair(ops._comp(sd, me, zb.size), zb)
            if not st.hold:
                ops._send(st.t, "stamp/z", zb)
        elif me == st.i:
            (sd,) = seeds[(0, "z")]
            res = Pair(ops._comp(sd, me, st.n_out), ops._comp(sd, (me + 1) % 3, st.n_out))
        else:
            (sd,) = seeds[(0, "z")]
            zi = ops._comp(sd, (me + 1) % 3, st.n_out)
            res = Pair(np.zeros(st.n_out, dtype=U64) if st.hold else ops._recv(st.e, "stamp/z", st.n_out), zi)
        return Pair(res.a.reshape(st.oshape), res.b.reshape(st.oshape))

    def _output(self, st: _Step, flat: np.ndarray) -> np.ndarray | None:
        """``StampOps.output``, semi-honest (the fused output step, receiver ``st.e``)."""
        ops, eng = self.ops, self.eng
        me, r = eng.me, st.e
        if me != r and st.sent is not None:
            ops._sent_ahead.discard(st.sent)            # (sent before the online phase)
            return None
        if me != r:
            (sd,) = ops._ahead.pop(st.op)[1][(0, "o")]
            ops._send(r, "stamp/out'", self._add(flat, ops._comp(sd, me, st.n_in)))
            return None
        s = self._add(ops._others(0, ((r - 1) % 3, (r + 1) % 3), "stamp/out'", st.n_in), flat)
        (y,) = ops._dev("output", st.meta, st.spec, eng.pack(s), kind="output")
        return eng.ring.reduce(y).reshape(st.oshape)


def _no(backend, why) -> None:
    backend.plan_why = why     # (why the plan does not cover this run: ``info["plan_why"]``)
    return None


def compile_plan(backend, graph, env: dict) -> OnlinePlan | None:
    """The party's ``OnlinePlan`` from the warm run's trace, or None when the plan does not
    cover this run (see the module's docstring). Offline; reads the trace and drops it."""
    ops, eng, ip = backend.ops, backend.eng, backend._input_plan
    btrace, otrace = backend.trace, ops.trace
    backend.trace = ops.trace = None
    if (eng.malicious or ip is None or backend.guard is not None or not backend.warmed or btrace is None
            or otrace is None or backend.warm_end is None or ops.warm_end is None or eng.ring.limbs != 1
            or len(btrace) != len(otrace) or len(graph.inputs) != 1 or graph.inputs[0].name != ip.name
            or len(graph.output_names) != 1):
        return _no(backend, 10)
    consumers, outputs = graph.consumers(), set(graph.output_names)
    consts = {id(env[w]) for w in graph.weight_info if w in env}
    known = dict.fromkeys(env)            # the tensors computed so far (``plan_product`` asks)
    known[ip.name] = None
    count = sum(n.op not in MOVEMENT for n in graph.nodes)
    me, cur, layer, k = eng.me, ip.name, 0, 0
    op, ctr = ops.op, ops.ctr
    steps: list[_Step] = []
    done: set = set()
    for node in graph.nodes:
        if node.name in done:
            continue
        if steps and steps[-1].kind == "output":
            return _no(backend, 24)                   # (something after the fused output step)
        if node.op in MOVEMENT:
            if list(node.inputs) != [cur] or len(node.outputs) != 1:
                return _no(backend, 27)
            steps.append(_Step("move", node))
            cur = node.outputs[0]
            known[cur] = None
            continue
        layer += 1
        if (node.op not in _PRODUCTS or len(node.inputs) < 2 or node.inputs[0] != cur
                or node.inputs[1] not in graph.weight_info or product_siblings(graph, node, consumers, done)
                or k >= len(btrace)):
            return _no(backend, 36)
        pl = plan_product(graph, node, consumers, outputs, backend, known)
        (name, src), rec = btrace[k], otrace[k]
        k += 1
        kind = "output" if pl["to_out"] is not None else "product"
        if (pl["moves"] or name != node.name or src not in ("ahead", "input", "held", "stacked")
                or rec[0] != ("output" if kind == "output" else "run")):
            return _no(backend, 42)
        _, who, r_op, r_ctr, n_op, jobs, facts, reqs, got = rec
        if kind == "product" and who != "3of3":
            return _no(backend, 45)
        if len(jobs) != 1 or jobs[0].act is not None or (r_op, r_ctr) != (op, ctr):
            return _no(backend, 47)
        job, (spec, sbytes, n_in, oshape, n_out) = jobs[0], facts[0]
        memo = ops._spec_memo.get((op, 0))
        if memo is None or memo is not facts[0] and memo[0] != job.spec or spec != job.spec:
            return _no(backend, 51)                   # (the live spec is the one the dry run validated)
        if [s["node"]["name"] for s in spec["steps"] if s.get("op") == "node"] != [c.name for c in pl["chain"]]:
            return _no(backend, 53)
        if any(id(p) not in consts for p in job.params):
            return _no(backend, 55)                   # (the job's parameters are weights: its data's tail is fixed)
        if reqs and (got is None or ops._ahead.get(op) is not got or got[0] != seed_signature(reqs)):
            return _no(backend, 57)                   # (the seeds are the ones served ahead)
        tail = np.concatenate([p.a.reshape(-1) for p in job.params]).astype(U64) if job.params else None
        st = _Step(kind, node, mark=f"layer {layer}/{count} {node.op}", tail=tail, op=op, ctr=ctr, n_op=n_op,
                   n_in=n_in, n_out=n_out, oshape=tuple(oshape), got=got if reqs else None, moves=pl["to_out"])
        if src == "ahead":
            z = backend._z_ahead.get(node.name)
            if z is None:
                return _no(backend, 64)
            st.src = ("ahead", z)
        elif src == "stacked":
            sw = backend._stacked.get(node.inputs[1])
            if sw is None or sw.source is not env[node.inputs[1]]:
                return _no(backend, "stacked")
            st.src = ("stacked", sw)
        else:
            st.src = (src, None)
        if kind == "product":
            st.i = job.leader
            st.e, st.t, st.hold = (st.i + 1) % 3, (st.i + 2) % 3, bool(job.hold)
            key = (op, 0, "stamp/x'")
            st.sent = key if me != st.e and key in ops._sent_ahead else None
            if me != st.e and st.sent is None and (got is None or (0, "x") not in got[1]):
                return _no(backend, 74)
            if me != st.e and (got is None or (0, "z") not in got[1]):
                return _no(backend, 76)               # (the leader's and the third party's result seeds)
            if me == st.e:
                st.meta = np.array([op, n_op, ctr, 0, 1, 0], dtype=np.int64)     # ``_meta(0, 1, 0)``
                st.spec = sbytes if sbytes is not None else spec_bytes(spec)
            cur = st.last = pl["last"]
        else:
            r = who
            st.e = r
            key = (op, 0, "stamp/out'")
            st.sent = key if me != r and key in ops._sent_ahead else None
            if me == r:
                st.meta = np.array([op, n_op, ctr, 0, 0], dtype=np.int64)        # ``_meta(0, 0)``
                st.spec = sbytes if sbytes is not None else spec_bytes(spec)
            elif st.sent is None and st.got is None:
                return _no(backend, 90)
            done.update(mv.name for mv in pl["to_out"])
            cur = None
        done.add(node.name)
        done.update(c.name for c in pl["chain"])
        known[pl["last"]] = None
        steps.append(st)
        op, ctr = op + 1, ctr + n_op
    if k != len(btrace) or not steps or steps[-1].kind != "output" or (op, ctr) != ops.warm_end[:2]:
        return _no(backend, 99)
    start = (ops.op, ops.ctr, backend._rot, set(backend._held))
    return OnlinePlan(backend, steps, start, (backend.warm_end, ops.warm_end), eng.ring.mask)
