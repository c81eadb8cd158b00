# per-step spans of the hosts' online phase (issue #23, docs/protocols/stamp.md "Eleventh pass"; not part
# of the package), enabled by STSTEP_DIR only:
#   PYTHONPATH=scripts/stamp_ab/steps:src STSTEP_DIR=<folder> python scripts/stamp_ab/cell.py W3 1
# Each host process writes <folder>/<party>-<pid>.jsonl: one line per call of a wrapped function
# made inside the online phase: [name, depth, t0, t1, thread CPU at entry, at exit] on the
# perf_counter clock (CLOCK_MONOTONIC: the processes share it). `steps_report.py DIR` sums them.
import os

_D = os.environ.get("STSTEP_DIR")
if _D and "secinfer.protocols.stamp.ltee_device" not in " ".join(getattr(__import__("sys"), "orig_argv", [])):
    import contextlib
    import functools
    import json
    import time

    _pc, _tt = time.perf_counter, time.thread_time
    EV: list = []
    ST = {"on": False, "depth": 0, "who": "host"}

    def _wrap(owner, attr, name=None, static=False, tag_arg=None):
        fn = getattr(owner, attr)
        if static:
            fn = fn.__func__ if hasattr(fn, "__func__") else fn
        label = name or attr

        @functools.wraps(fn)
        def w(*a, **k):
            if not ST["on"]:
                return fn(*a, **k)
            d = ST["depth"]
            ST["depth"] = d + 1
            lab = label if tag_arg is None or len(a) <= tag_arg else f"{label} {a[tag_arg]}"
            t0, c0 = _pc(), _tt()
            try:
                return fn(*a, **k)
            finally:
                EV.append([lab, d, t0, _pc(), c0, _tt()])
                ST["depth"] = d
        setattr(owner, attr, staticmethod(w) if static else w)

    try:
        from secinfer.arith import ring as _ring
        from secinfer.net import channel as _ch
        from secinfer.net import tcp_transport as _tcp
        from secinfer.protocols import base as _base  # noqa: F401
        from secinfer.protocols.rep3 import engine as _eng, executor as _ex, kernels as _k
        from secinfer.protocols.stamp import backend as _be, input_offline as _io, ltee as _lt, nonlinear as _nl
        from secinfer.protocols.stamp import protocol as _pr
        ok = True
    except Exception:   # (another package's process)
        ok = False
    if ok:
        for owner, attrs in (
                (_pr, ["_client_input"]),
                (_io.InputPlan, ["share", "product"]),
                (_be.StampBackend, ["_local_product", "product_output", "products", "_run_many", "_split",
                                    "_product_task", "_held_product", "chain"]),
                (_nl.StampOps, ["run", "output", "_seeds", "_comp", "_dev", "_mask"]),
                (_eng.Engine, ["send_ring", "recv_ring", "pack", "input", "reveal_to"]),
                (_tcp.TcpEndpoint, ["send", "recv"]),
                (_lt.LteeLink, ["_transact"]),
                (_ex, ["run_graph"]),
                (_k, ["validate", "out_shape", "n_params", "bilinear"]),
                (_nl, ["spec_bytes"]),
                (_be, ["stacked_product", "half_product"]),
                (_io, ["half_product"])):
            for a in attrs:
                if hasattr(owner, a):
                    _wrap(owner, a, f"{getattr(owner, '__name__', '')}.{a}",
                          tag_arg=2 if a in ("send", "recv", "send_ring", "recv_ring") else 1 if a == "_transact" else None)
        for a in ("_jobs", "_node_steps"):
            if hasattr(_be.StampBackend, a):   # (main; moved to ``stamp.jobs`` by the eleventh pass)
                _wrap(_be.StampBackend, a, "StampBackend." + a, static=True)
        for a, b in (("make_jobs", "_jobs"), ("node_steps", "_node_steps")):
            if hasattr(_be, a):
                _wrap(_be, a, "StampBackend." + b)
        for a in ("_flat_3", "_flat_pair"):
            _wrap(_nl.StampOps, a, "StampOps." + a, static=True)
        R = _ring.Ring if hasattr(_ring, "Ring") else None
        if R is not None:
            for a in ("add", "sub", "reduce"):
                if hasattr(R, a):
                    _wrap(R, a, "Ring." + a)
        _phase = _ch.Endpoint.phase

        @contextlib.contextmanager
        def phase(self, name):
            if name == "online":
                ST["who"] = self.me
                EV.append(["<online>", -1, _pc(), 0.0, _tt(), 0.0])
                ST["on"], ST["depth"] = True, 0
            with _phase(self, name) as x:
                yield x
            if name == "online":
                ST["on"] = False
                EV.append(["</online>", -1, _pc(), 0.0, _tt(), 0.0])
                with open(os.path.join(_D, f"{ST['who']}-{os.getpid()}.jsonl"), "w") as f:
                    for e in EV:
                        f.write(json.dumps(e) + "\n")
                EV.clear()
        _ch.Endpoint.phase = phase
