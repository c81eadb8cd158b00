"""The fully encrypted baseline SAFHIRE is compared with: CKKS inference ORION-style
[SAFHIRE Sec. 6, baseline] on Lattigo v6 through the HE core (``secinfer.crypto.he``).

Bench-only (not a protocol): one process plays both sides. The client's work (key
generation, encryption, decryption) and the server's (everything in between) are timed
apart. What it does, per layer of a plain-CNN/ResNet graph (Conv with folded batch norm,
Relu, Add, GlobalAveragePool, Flatten, Gemm):

* Packing: every activation tensor lives in ONE ciphertext of 2^15 slots (N = 2^16) in the
  multiplexed layout of Lee et al. / ORION: a (C, H, W) tensor on an R x R grid (R = input
  width) with gap g = R / H, channel c at slot (c // g^2) R^2 + (g y + (c mod g^2) // g) R
  + g x + c mod g. Stride-2 convolutions write straight into the next stage's layout.
* Convolutions (and 1x1 shortcuts) are one diagonal-method linear transform each
  (``he.LinearPlan.from_coo``: BSGS rotations with hoisting, one rescale); bias added as a
  plaintext. Galois keys are generated per distinct transform set (a stage) and freed
  after it, to bound memory.
* ReLU: every ReLU input is bootstrapped (Lattigo's N = 2^16 bootstrapping), then a
  Chebyshev interpolant of ReLU of degree ``relu_degree`` on [-B, B] is evaluated, B the
  largest pre-activation seen on the calibration inputs times ``margin`` (per layer).
  ORION's composite minimax sign approximation is NOT implemented: this is the simpler,
  single-polynomial choice, stated as such.
* Head: average pooling and the fully connected layer as one masked product per class,
  then a rotate-and-sum over the occupied slots; bias added; the client decrypts slot 0 of
  each class's ciphertext.

``run(..., stop_after=k)`` runs the graph's first k ReLUs end to end (e.g. the stem and
one residual block); per-op costs measured there and on one instance of every distinct
convolution type drive the extrapolation of the rest, which the report labels as such.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from secinfer.errors import ConfigError

PARAMS = "ckks-boot-n16-128"


# ---------------------------------------------------------------- layouts

@dataclass(frozen=True)
class Layout:
    """Multiplexed slot layout of a (C, H, W) tensor on an R x R grid."""
    C: int
    H: int
    W: int
    R: int

    @property
    def g(self) -> int:
        return self.R // self.H

    def slots(self) -> np.ndarray:
        g, R = self.g, self.R
        c, y, x = np.meshgrid(np.arange(self.C), np.arange(self.H), np.arange(self.W), indexing="ij")
        s = (c // (g * g)) * R * R + (g * y + (c % (g * g)) // g) * R + g * x + c % g
        return s.reshape(-1)


def layout_for(shape, R: int) -> Layout:
    C, H, W = (int(d) for d in shape)
    if H != W or R % H or (R // H) * H != R:
        raise ConfigError(f"ckks baseline: tensor {shape} does not fit the {R}x{R} multiplexed grid")
    return Layout(C, H, W, R)


def conv_coo(w: np.ndarray, stride: int, pad: int, lin: Layout, lout: Layout):
    """Coordinates (out logical row, in slot, weight) of a convolution between layouts."""
    co_n, ci_n, kh, kw = w.shape
    in_slot = lin.slots()
    co, ci, dy, dx, oy, ox = np.meshgrid(np.arange(co_n), np.arange(ci_n), np.arange(kh),
                                         np.arange(kw), np.arange(lout.H), np.arange(lout.W),
                                         indexing="ij")
    iy = stride * oy - pad + dy
    ix = stride * ox - pad + dx
    ok = (iy >= 0) & (iy < lin.H) & (ix >= 0) & (ix < lin.W)
    rows = (co * lout.H * lout.W + oy * lout.W + ox)[ok]
    cols = in_slot[(ci * lin.H * lin.W + iy * lin.W + ix)[ok]]
    vals = w[co, ci, dy, dx][ok]
    return rows, cols, vals


# ---------------------------------------------------------------- cleartext model of the same circuit

def relu_poly(B: float, degree: int):
    from secinfer.crypto.he import bootstrap as hb

    return hb.chebyshev(lambda v: np.maximum(v, 0.0), degree, -B, B)


def simulate(graph, x: np.ndarray, bounds: dict, degree: int) -> np.ndarray:
    """The approximated network in the clear (float64): every ReLU replaced by its
    polynomial. Labelled as simulation wherever reported."""
    from secinfer.crypto.he import bootstrap as hb
    from secinfer.ir.float_exec import run_node_float

    env = {k: np.asarray(v, dtype=np.float64) for k, v in graph.initializers.items()}
    env[graph.inputs[0].name] = np.asarray(x, dtype=np.float64)
    for n in graph.nodes:
        xs = [env[i] for i in n.inputs if i]
        if n.op == "Relu":
            B = bounds[n.outputs[0]]
            env[n.outputs[0]] = hb.cheb_value(relu_poly(B, degree), -B, B, xs[0])
        else:
            env[n.outputs[0]] = run_node_float(n, xs)[0]
    return env[graph.outputs[0].name]


def calibrate(graph, calib: np.ndarray, margin: float) -> dict:
    """Per-ReLU interval half-width: margin x the largest |pre-activation| seen."""
    from secinfer.ir.float_exec import run_float_all

    out = {}
    for i in range(len(calib)):
        vals = run_float_all(graph, {graph.inputs[0].name: calib[i:i + 1]}, intermediates=True)
        for n in graph.nodes:
            if n.op == "Relu":
                m = float(np.abs(vals[n.inputs[0]]).max())
                out[n.outputs[0]] = max(out.get(n.outputs[0], 0.0), m)
    return {k: margin * v for k, v in out.items()}


# ---------------------------------------------------------------- the encrypted run

@dataclass
class Costs:
    ops: dict = field(default_factory=dict)            # op -> [count, seconds]

    def add(self, op: str, dt: float, n: int = 1) -> None:
        c = self.ops.setdefault(op, [0, 0.0])
        c[0] += n
        c[1] += dt

    def per(self, op: str) -> float:
        c = self.ops.get(op)
        return c[1] / c[0] if c and c[0] else float("nan")


class Engine:
    """Runs a ResNet-like graph on CKKS ciphertexts (see the module docstring)."""

    def __init__(self, graph, params_name: str = PARAMS, degree: int = 63, margin: float = 1.25,
                 calib: np.ndarray | None = None, log=print, bootstrap: str = "lattigo",
                 max_diagonals: int = 256, max_keys: int = 96) -> None:
        """``bootstrap``: "lattigo" (real bootstrapping) or "reencrypt-standin": every
        bootstrap replaced by decrypt + re-encrypt with the secret key -- NOT a secure
        protocol step, used only where Lattigo's N = 2^16 bootstrapping keys do not fit in
        memory, to run the rest of the circuit at real parameters; its cost is then taken
        from the bootstrapping measurements (extrapolated), never from the stand-in."""
        if bootstrap not in ("lattigo", "reencrypt-standin"):
            raise ConfigError(f"ckks baseline: bootstrap must be 'lattigo' or 'reencrypt-standin', got {bootstrap!r}")
        self.bootstrap_mode = bootstrap
        self.max_diagonals, self.max_keys = int(max_diagonals), int(max_keys)
        from secinfer.crypto import he
        from secinfer.crypto.he import bootstrap as hb

        self.he, self.hb, self.log = he, hb, log
        self.graph = graph
        self.P = he.get_params(params_name)
        self.degree = degree
        self.depth = hb.poly_depth(degree)
        self.R = int(graph.inputs[0].shape[-1])
        self.costs = Costs()
        calib = calib if calib is not None else \
            np.random.default_rng(1).standard_normal((8,) + tuple(graph.inputs[0].shape[1:])).astype(np.float32)
        self.bounds = calibrate(graph, calib, margin)
        t = time.perf_counter()
        self.kp = self.P.keygen()
        self.boot = hb.Bootstrapper(self.P, self.kp.sk) if bootstrap == "lattigo" else None
        self.relin = self.P.gen_eval_keys(self.kp.sk, relin=True)
        self.ev_relin = he.Evaluator(self.P, self.relin)
        self.costs.add("keygen_boot", time.perf_counter() - t)
        self.boot_key_bytes = self.boot.key_bytes if self.boot else None
        self.fresh_level = self.boot.output_level if self.boot else self.P.max_level
        if self.fresh_level < self.depth + 1:
            raise ConfigError(f"ckks baseline: ReLU degree {degree} needs {self.depth} levels, plus 1 "
                              f"for the next linear layer; bootstrapping leaves {self.fresh_level}")
        self._keys = None          # (galois set, EvalKeys, Evaluator) of the current stage
        self.rot_key_bytes_peak = 0

    # ------------------------------------------------------------ keys per transform set

    def _evaluator(self, galois: set[int]):
        """An evaluator holding Galois keys for ``galois``: the current key set grows by
        union while it stays under ``max_keys``, else is replaced (bounds memory)."""
        if self._keys is None or not galois <= self._keys[0]:
            want = set(galois)
            if self._keys is not None:
                if len(self._keys[0] | want) <= self.max_keys:
                    want |= self._keys[0]
                self._keys[2].close()
                self._keys[1].close()
                self._keys = None
            t = time.perf_counter()
            keys = self.P.gen_eval_keys(self.kp.sk, relin=True, galois=sorted(want))
            self.costs.add("keygen_rot", time.perf_counter() - t, len(want))
            self._keys = (want, keys, self.he.Evaluator(self.P, keys))
            dnum = -(-len(self.P.q) // len(self.P.p))
            per_key = 2 * dnum * (len(self.P.q) + len(self.P.p)) * self.P.n * 8
            self.rot_key_bytes_peak = max(self.rot_key_bytes_peak, per_key * len(want))
        return self._keys[2]

    # ------------------------------------------------------------ layers

    def conv(self, ct, w, b, stride, pad, lin: Layout, lout: Layout, tag: str):
        """One convolution: its non-zero diagonals in chunks of at most ``max_diagonals``
        (each chunk one BSGS transform, encoded, applied, freed: bounds memory), summed."""
        he = self.he
        rows, cols, vals = conv_coo(w, stride, pad, lin, lout)
        B = self.P.max_slots
        out_slot = lout.slots()
        kk = (cols - out_slot[rows]) % B
        uniq = np.unique(kk)
        chunks = [uniq[i:i + self.max_diagonals] for i in range(0, len(uniq), self.max_diagonals)]
        acc = None
        for ch in chunks:
            sel = np.isin(kk, ch)
            t = time.perf_counter()
            plan = he.LinearPlan.from_coo(self.P, rows[sel], cols[sel], vals[sel],
                                          lout.C * lout.H * lout.W, B, out_slot=out_slot,
                                          level=ct.level, log_slots=self.P.log_max_slots)
            self.costs.add("encode", time.perf_counter() - t)
            ev = self._evaluator(set(plan.galois_elements()))
            t = time.perf_counter()
            (part,) = plan.apply(ev, [ct])
            if acc is None:
                acc = part
            else:
                nxt = ev.add(acc, part)
                acc.close()
                part.close()
                acc = nxt
            self.costs.add("conv", time.perf_counter() - t)
            self.costs.add(f"conv[{tag}]", time.perf_counter() - t)
            for blk in plan.blocks:
                blk.transform.close()
        t = time.perf_counter()
        bias = np.zeros(B)
        bias[out_slot] = np.repeat(b, lout.H * lout.W)
        with self.P.encode(bias, level=acc.level, log_slots=self.P.log_max_slots,
                           log_scale=acc.log_scale) as pt:
            res = self.ev_relin.add(acc, pt)
        acc.close()
        self.costs.add("conv", time.perf_counter() - t)
        return res, len(uniq)

    def refresh(self, ct):
        """Bootstrap (or, in stand-in mode, decrypt + re-encrypt: see __init__)."""
        t = time.perf_counter()
        if self.boot is not None:
            out = self.boot.bootstrap(ct)
            self.costs.add("bootstrap", time.perf_counter() - t)
            return out
        v = self.P.decrypt_decode(ct, self.kp.sk)
        out = self.P.encrypt(v, self.kp.pk, log_slots=self.P.log_max_slots, level=self.fresh_level)
        self.costs.add("bootstrap_standin", time.perf_counter() - t)
        return out

    def relu(self, ct, name: str):
        B = self.bounds[name]
        fresh = self.refresh(ct)
        t = time.perf_counter()
        out = self.hb.poly_eval(self.ev_relin, fresh, relu_poly(B, self.degree), -B, B)
        fresh.close()
        self.costs.add("relu_poly", time.perf_counter() - t)
        return out

    def head(self, ct, lin: Layout, w_fc: np.ndarray, b_fc: np.ndarray):
        """GlobalAveragePool + Gemm: per class, a masked product then a rotate-and-sum."""
        span = 1 << int(np.ceil(np.log2(int(lin.slots().max()) + 1)))
        steps, s = [], 1
        while s < span:
            steps.append(s)
            s *= 2
        ev = self._evaluator(set(self.P.galois_elements(rotations=steps)))
        t = time.perf_counter()
        outs = []
        slots = lin.slots()
        for j in range(w_fc.shape[0]):
            mask = np.zeros(self.P.max_slots)
            mask[slots] = np.repeat(w_fc[j], lin.H * lin.W) / (lin.H * lin.W)
            with ev.mul_plain_vector(ct, mask) as m:
                summed = ev.rotate_and_sum(m, 1, span)
            with summed:
                outs.append(ev.add_scalar(summed, float(b_fc[j])))
        self.costs.add("head", time.perf_counter() - t)
        return outs

    # ------------------------------------------------------------ the graph

    def run(self, x: np.ndarray, stop_after: int | None = None) -> dict:
        """Encrypt x, evaluate the graph (its first ``stop_after`` ReLUs, or all of it),
        decrypt. Returns the decrypted tensor with the float and simulated references."""
        from secinfer.ir.float_exec import run_float_all

        g = self.graph
        init = g.initializers
        shapes = {k: tuple(int(d) for d in v[1:]) for k, v in g.shapes.items()}
        t = time.perf_counter()
        lin0 = layout_for(shapes[g.inputs[0].name], self.R)
        vec = np.zeros(self.P.max_slots)
        vec[lin0.slots()] = np.asarray(x, dtype=np.float64).reshape(-1)
        ct0 = self.P.encrypt(vec, self.kp.pk, log_slots=self.P.log_max_slots,
                             level=self.fresh_level)
        self.costs.add("client_encrypt", time.perf_counter() - t)
        env = {g.inputs[0].name: (ct0, lin0)}
        uses: dict[str, int] = {}
        for n in g.nodes:
            for i in n.inputs:
                uses[i] = uses.get(i, 0) + 1
        relus, ran, diag_counts = 0, [], {}
        t_server = time.perf_counter()
        last = None
        pending_flat = None
        for n in g.nodes:
            if n.op == "Conv":
                ct, lin = env[n.inputs[0]]
                w = np.asarray(init[n.inputs[1]], dtype=np.float64)
                b = np.asarray(init[n.inputs[2]], dtype=np.float64) if len(n.inputs) > 2 else np.zeros(w.shape[0])
                st = int(n.attrs.get("strides", (1, 1))[0])
                pad = int(n.attrs.get("pads", (0, 0, 0, 0))[0])
                lout = layout_for(shapes[n.outputs[0]], self.R)
                tag = f"{w.shape[1]}->{w.shape[0]} k{w.shape[2]} s{st} {lin.H}x{lin.W}"
                out, nd = self.conv(ct, w, b, st, pad, lin, lout, tag)
                diag_counts[tag] = nd
                self.log(f"conv {tag}: {nd} diagonals, level {out.level}")
                env[n.outputs[0]] = (out, lout)
            elif n.op == "Relu":
                ct, lin = env[n.inputs[0]]
                env[n.outputs[0]] = (self.relu(ct, n.outputs[0]), lin)
                relus += 1
                self.log(f"relu {relus} done ({time.perf_counter() - t_server:.1f}s)")
            elif n.op == "Add":
                (a, la), (b2, lb) = env[n.inputs[0]], env[n.inputs[1]]
                if la != lb:
                    raise ConfigError(f"ckks baseline: Add of two layouts {la} {lb}")
                t = time.perf_counter()
                ev = self.ev_relin
                if a.level != b2.level:
                    hi, lo = (a, b2) if a.level > b2.level else (b2, a)
                    with ev.drop_level(hi, hi.level - lo.level) as d:
                        out = ev.add(d, lo)
                else:
                    out = ev.add(a, b2)
                self.costs.add("add", time.perf_counter() - t)
                env[n.outputs[0]] = (out, la)
            elif n.op == "GlobalAveragePool":
                env[n.outputs[0]] = env[n.inputs[0]]
            elif n.op == "Flatten":
                env[n.outputs[0]] = env[n.inputs[0]]
                pending_flat = n.outputs[0]
            elif n.op == "Gemm":
                ct, lin = env[n.inputs[0]]
                if n.inputs[0] != pending_flat:
                    raise ConfigError("ckks baseline: Gemm must follow GlobalAveragePool + Flatten")
                w = np.asarray(init[n.inputs[1]], dtype=np.float64)
                if int(n.attrs.get("transB", 0)) == 0:
                    w = w.T
                b = np.asarray(init[n.inputs[2]], dtype=np.float64).reshape(-1)
                env[n.outputs[0]] = (self.head(ct, lin, w, b), None)
            else:
                raise ConfigError(f"ckks baseline: operator {n.op} not supported")
            ran.append(n.outputs[0])
            last = n.outputs[0]
            for i in n.inputs:                       # free ciphertexts nobody reads any more
                uses[i] -= 1
                if uses[i] == 0 and i in env and i != g.inputs[0].name:
                    v = env.pop(i)[0]
                    for c in (v if isinstance(v, list) else [v]):
                        if c is not env.get(last, (None,))[0]:
                            c.close()
            if stop_after is not None and n.op == "Relu" and relus >= stop_after:
                break
        server_s = time.perf_counter() - t_server
        # client: decrypt
        t = time.perf_counter()
        ct, lout = env[last]
        if lout is None:
            got = np.array([self.P.decrypt_decode(c, self.kp.sk).real[0] for c in ct])
        else:
            got = self.P.decrypt_decode(ct, self.kp.sk).real[lout.slots()]
        self.costs.add("client_decrypt", time.perf_counter() - t)
        ref = run_float_all(g, {g.inputs[0].name: x}, intermediates=True)[last].reshape(-1)
        return {"output": last, "relus": relus, "got": got, "float": ref.astype(np.float64),
                "server_s": server_s, "diagonals": diag_counts, "nodes_run": len(ran)}

    def close(self) -> None:
        if self._keys is not None:
            self._keys[2].close()
            self._keys[1].close()
        for o in (self.ev_relin, self.relin, self.boot):
            if o is not None:
                o.close()
        self.kp.close()


# ---------------------------------------------------------------- bench driver

def measure_bootstrap(params_name: str, reps: int = 2) -> dict:
    """Lattigo bootstrapping on one ring: key generation, key bytes, seconds per bootstrap
    (full slots), and the error it adds."""
    import resource

    from secinfer.crypto import he
    from secinfer.crypto.he import bootstrap as hb

    P = he.get_params(params_name)
    kp = P.keygen()
    t = time.perf_counter()
    bt = hb.Bootstrapper(P, kp.sk)
    keygen = time.perf_counter() - t
    x = np.random.default_rng(7).uniform(-1, 1, P.max_slots)
    secs, err = [], 0.0
    for _ in range(reps):
        with P.encrypt(x, kp.pk, log_slots=P.log_max_slots, level=0) as ct:
            t = time.perf_counter()
            with bt.bootstrap(ct) as fresh:
                secs.append(time.perf_counter() - t)
                err = max(err, float(np.abs(P.decrypt_decode(fresh, kp.sk).real - x).max()))
    out = {"params": params_name, "log_n": P.log_n, "slots": P.max_slots, "keygen_s": keygen,
           "bootstrap_s": min(secs), "bootstrap_s_all": secs, "key_bytes": bt.key_bytes,
           "extended_log_qp": bt.log_qp, "output_level": bt.output_level, "max_abs_err": err,
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    bt.close()
    kp.close()
    return out


def extrapolate_bootstrap(measured: dict, log_n: int = 16) -> dict:
    """Scale a bootstrapping measurement to ring 2^log_n at the same chain: N log N for
    time (every step is NTTs and key switches over the same number of limbs), N for the
    key bytes (also more keys at more slots: a lower bound). EXTRAPOLATION, not a run."""
    n0 = measured["log_n"]
    f_t = (2 ** log_n * log_n) / (2 ** n0 * n0)
    f_b = 2 ** (log_n - n0)
    return {"log_n": log_n, "from": measured["params"], "extrapolated": True,
            "bootstrap_s": measured["bootstrap_s"] * f_t, "time_factor": f_t,
            "key_bytes_lower_bound": measured["key_bytes"] * f_b}


def baseline_rows(graph_name: str = "resnet20", stop_after: int | None = None, sim_inputs: int = 16,
                  log=print) -> dict:
    """The ResNet-20 baseline as far as it fits here: bootstrapping measured on the small
    rings and scaled to N = 2^16; everything else run at N = 2^16 with the stand-in
    refresh; the total = measured server time - stand-in time + bootstraps x the
    extrapolated bootstrap cost. Accuracy: the decrypted logits against float, and the
    approximated network (cleartext simulation) against float on ``sim_inputs`` inputs."""
    from secinfer.ir import zoo
    from secinfer.ir.float_exec import run_float
    from secinfer.ir.onnx_import import load_model

    boots = [measure_bootstrap(n) for n in ("ckks-boot-n12-insecure", "ckks-boot-n13-insecure")]
    log(f"bootstrapping measured: " + ", ".join(f"N=2^{b['log_n']}: {b['bootstrap_s']:.2f}s, keys "
                                              f"{b['key_bytes'] / 1e9:.2f} GB" for b in boots))
    ext = extrapolate_bootstrap(boots[-1])
    g = load_model(zoo.build(graph_name, seed=0, fold_bn=True).SerializeToString())
    x = np.random.default_rng(0).standard_normal((1,) + tuple(g.inputs[0].shape[1:])).astype(np.float32)
    eng = Engine(g, bootstrap="reencrypt-standin", log=log)
    try:
        res = eng.run(x, stop_after=stop_after)
        costs = {k: list(v) for k, v in eng.costs.ops.items()}
        n_boot = costs.get("bootstrap_standin", [0, 0.0])[0]
        standin_s = costs.get("bootstrap_standin", [0, 0.0])[1]
        server_est = res["server_s"] - standin_s + n_boot * ext["bootstrap_s"]
        got, ref = res["got"], res["float"]
        acc = {"max_abs_err_vs_float": float(np.abs(got - ref).max()),
               "rel_err_vs_float": float(np.abs(got - ref).max() / max(1e-12, np.abs(ref).max()))}
        if res["output"] == g.outputs[0].name:
            acc["argmax_agrees"] = bool(np.argmax(got) == np.argmax(ref))
        xs = np.random.default_rng(11).standard_normal((sim_inputs,) + tuple(g.inputs[0].shape[1:])).astype(np.float32)
        agree, rel = 0, []
        for i in range(sim_inputs):
            fl = run_float(g, xs[i:i + 1]).reshape(-1)
            sm = simulate(g, xs[i:i + 1], eng.bounds, eng.degree).reshape(-1)
            agree += int(np.argmax(fl) == np.argmax(sm))
            rel.append(float(np.abs(sm - fl).max() / max(1e-12, np.abs(fl).max())))
        acc["simulated_argmax_agreement"] = agree / sim_inputs
        acc["simulated_rel_err_median"] = float(np.median(rel))
        acc["simulated_inputs"] = sim_inputs
        return {"model": f"zoo:{graph_name}", "params": eng.P.name, "relu_degree": eng.degree,
                "ran": {"relus": res["relus"], "nodes": res["nodes_run"], "output": res["output"],
                        "bootstrap": "reencrypt-standin (cost replaced by the extrapolated one)"},
                "server_measured_s": res["server_s"], "standin_s": standin_s, "bootstraps": n_boot,
                "server_estimated_s": server_est, "costs": costs, "diagonals": res["diagonals"],
                "rotation_key_bytes_peak": eng.rot_key_bytes_peak,
                "bootstrap_measured": boots, "bootstrap_extrapolated": ext, "accuracy": acc,
                "bounds": eng.bounds}
    finally:
        eng.close()
