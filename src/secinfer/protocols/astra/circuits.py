"""General circuit evaluation with ASTRA over Z_2 (boolean) or Z_2^l (arithmetic) [ASTRA 4].

A ``Circuit`` (``secinfer.crypto.gc.circuit``) is evaluated level by level on [[.]]-shares:
XOR gates are additions (free), INV adds the public constant 1, AND gates are
multiplications (Pi_mul^s / Pi_mul^m), all AND gates of one level in one call, so the online
phase takes one round per AND level (the multiplicative depth D, [ASTRA Thm. 4.2]) plus the
final ``verify`` when malicious. Over Z_2^l the same gates read ADD / MUL (INV = x + 1).

``eval_offline`` runs the distributor's pass (masks, gamma, and in malicious mode chi and the
triple checks) and returns the state ``eval_online`` consumes.
"""

from __future__ import annotations

import numpy as np

from secinfer.crypto.gc.circuit import Circuit
from secinfer.sharing.astra import AShare


def _wires(n: int, nw: int):
    return {k: np.zeros((n, nw), np.uint64) for k in ("m", "l1", "l2")}


def _get(w, idx, bits) -> AShare:
    return AShare(bits, *(None if w[k] is None else w[k][:, idx] for k in ("m", "l1", "l2")))


def _put(w, idx, s: AShare) -> None:
    for k in ("m", "l1", "l2"):
        v = getattr(s, k)
        if v is not None and w[k] is not None:
            w[k][:, idx] = v


def _load(eng, circ: Circuit, inputs: dict, online: bool):
    n = next(iter(inputs.values())).shape[0]
    w = _wires(n, circ.n_wires)
    role = eng.role
    if role == "p0" or not online:
        w["m"] = None if role == "p0" else w["m"]
    if role == "p1":
        w["l2"] = None
    if role == "p2":
        w["l1"] = None
    for name, ws in circ.inputs.items():
        _put(w, ws, inputs[name])
    return w


def _linear(eng, w, steps, online: bool):
    one = np.uint64(1)
    mask = eng.R.mask
    for (xa, xb, xo), (na, no) in steps:
        for k in ("m", "l1", "l2"):
            if w[k] is None or (k == "m" and not online):
                continue
            w[k][:, xo] = (w[k][:, xa] + w[k][:, xb]) & mask
            w[k][:, no] = w[k][:, na] if k != "m" else (w[k][:, na] + one) & mask


def eval_offline(eng, circ: Circuit, inputs: dict) -> dict:
    """inputs: name -> mask-only AShare (n, nbits). Returns the preprocessing state."""
    w = _load(eng, circ, inputs, online=False)
    preps = []
    for lv in circ.levels():
        _linear(eng, w, lv["lin"], online=False)
        a, b, o = lv["AND"]
        if len(o):
            x, y = _get(w, a, eng.bits), _get(w, b, eng.bits)
            x.m = y.m = None
            z, prep = eng.mul_offline(x.map(np.ascontiguousarray), y.map(np.ascontiguousarray))
            _put(w, o, z)
            preps.append(prep)
    eng.finish_offline()
    return {"w": w, "preps": preps}


def eval_online(eng, circ: Circuit, inputs: dict, state: dict) -> AShare:
    w = state["w"]
    if eng.role != "p0":
        w["m"] = np.zeros_like(w["l1"] if w["l1"] is not None else w["l2"])
        for name, ws in circ.inputs.items():
            w["m"][:, ws] = inputs[name].m
    k = 0
    for lv in circ.levels():
        _linear(eng, w, lv["lin"], online=True)
        a, b, o = lv["AND"]
        if len(o):
            x, y = _get(w, a, eng.bits), _get(w, b, eng.bits)
            z = _get(w, o, eng.bits)
            z = eng.mul_online(x.map(np.ascontiguousarray), y.map(np.ascontiguousarray), z, state["preps"][k])
            _put(w, o, z)
            k += 1
    if eng.malicious:
        eng.verify()
    return _get(w, circ.outputs, eng.bits)


def circuit_stats(circ: Circuit) -> dict:
    """Gate count and multiplicative depth (what [ASTRA 6.1.1] reports for AES-128)."""
    ops = [g[0] for g in circ.gates]
    return {"gates": len(ops), "and_gates": ops.count("AND"), "xor_gates": ops.count("XOR"),
            "inv_gates": ops.count("INV"), "and_depth": circ.and_depth,
            "inputs": {k: len(v) for k, v in circ.inputs.items()}, "outputs": len(circ.outputs)}
