"""Free-XOR [Kolesnikov-Schneider] + half-gates [Zahur-Rosulek-Evans, ASTRA ref. 70] garbling,
vectorised over a batch of circuit instances and over all AND gates of one level.

Labels are 128-bit values stored as two uint64 words (``(..., 2)`` arrays); the permute bit is
the LSB of word 0 and the global offset R has it set. The gate hash is the tweakable
correlation-robust hash from a fixed-key AES permutation [ASTRA ref. 10, GLNP15]:

    H(L, t) = AES_K(sigma(L) xor t) xor sigma(L),   sigma(w0, w1) = (w0 xor w1, w0)

computed with ``cryptography`` over whole arrays (one ``update`` call per level).
Per AND gate the garbler sends two ciphertexts (T_G, T_E): 2 kappa bits.

``garble``, ``evaluate`` and ``label_hash`` run in the native library when it is loaded
(``native/go/gc/gc.go``: the same arithmetic gate by gate with AES-NI, ~30x faster for the
comparison circuits, which matters on ASTRA's online path); the numpy code here is the
reference they are tested against (``native=False``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from secinfer.crypto.gc.circuit import Circuit, msb_sub_ripple
from secinfer.errors import ShapeError
from secinfer.native import lib as N

_FIXED_KEY = hashlib.sha256(b"secinfer/gc/fixed-key-aes").digest()[:16]
ONE64 = np.uint64(1)


class GateHash:
    def __init__(self) -> None:
        self._enc = Cipher(algorithms.AES(_FIXED_KEY), modes.ECB()).encryptor()

    def __call__(self, labels: np.ndarray, tweak: np.ndarray) -> np.ndarray:
        lab = labels.reshape(-1, 2)
        x = np.empty_like(lab)
        x[:, 0] = lab[:, 0] ^ lab[:, 1] ^ tweak.reshape(-1)
        x[:, 1] = lab[:, 0]
        s0 = x[:, 0] ^ tweak.reshape(-1)   # sigma(L) without the tweak, for the final xor
        out = np.frombuffer(self._enc.update(x.tobytes()), dtype=np.uint64).reshape(-1, 2).copy()
        out[:, 0] ^= s0
        out[:, 1] ^= x[:, 1]
        return out.reshape(labels.shape)


def lsb(labels: np.ndarray) -> np.ndarray:
    return (labels[..., 0] & ONE64).astype(np.uint8)


def select(zero: np.ndarray, bits: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Active labels zero ^ bit * R."""
    mask = (np.uint64(0) - bits.astype(np.uint64))[..., None]
    return zero ^ (mask & r)


@dataclass
class Garbled:
    tables: np.ndarray        # (batch, n_and, 2, 2) uint64: (T_G, T_E) per AND gate
    decode: np.ndarray        # (batch, n_out) uint8: permute bits of the output zero-labels
    out_zero: np.ndarray      # (batch, n_out, 2) garbler-only
    r: np.ndarray             # (2,) garbler-only


def input_labels(circ: Circuit, batch: int, rand) -> tuple[np.ndarray, dict]:
    """Draw R and the zero-labels of every input group from ``rand(shape) -> uint64``.

    Both garblers call this with the same shared stream to get identical labels."""
    r = rand((2,))
    r[0] |= ONE64
    zeros = {name: rand((batch, len(ws), 2)) for name, ws in circ.inputs.items()}
    return r, zeros


def _plan(circ: Circuit, batch: int) -> list:
    """Per level: (linear steps, AND gate arrays, tweak pairs for this batch size); cached."""
    cache = circ.__dict__.setdefault("_gc_plans", {})
    if batch in cache:
        return cache[batch]
    n_and = circ.and_count
    inst = np.arange(batch, dtype=np.uint64)[:, None] * np.uint64(n_and)
    plan, gid = [], 0
    for lv in circ.levels():
        a, b, o = lv["AND"]
        k = len(o)
        ids = np.arange(gid, gid + k)
        base = (inst + ids.astype(np.uint64)[None, :]) * np.uint64(2)
        tw = np.concatenate([base, base + ONE64], axis=1)           # (batch, 2k): j then j'
        plan.append((lv["lin"], a, b, o, ids, tw))
        gid += k
    cache[batch] = plan
    return plan


_KEY_BYTES = np.frombuffer(_FIXED_KEY, np.uint8).copy()


def _native_lib():
    """The native library's binding, or None if it cannot be loaded (numpy is used then)."""
    try:
        N.load()
        return N
    except Exception:  # noqa: BLE001 - no toolchain / no library: the numpy path is complete
        return None


def prepare(circ: Circuit) -> None:
    """Load the native library and build ``circ``'s gate program now (set-up or offline),
    so that the first garbling or evaluation of an online phase does neither."""
    if _native_lib() is not None:
        _program(circ)


def _program(circ: Circuit) -> np.ndarray:
    """The plan as int32 rows (op, a, b, out, gid) in execution order (0 XOR, 1 INV, 2 AND;
    gid numbers the AND gates as the tweaks and tables do); cached on the circuit."""
    prog = circ.__dict__.get("_gc_program")
    if prog is None:
        rows = []
        for lin, a, b, o, ids, _tw in _plan(circ, 1):
            for (xa, xb, xo), (na, no) in lin:
                rows += [(0, int(i), int(j), int(k), 0) for i, j, k in zip(xa, xb, xo)]
                rows += [(1, int(i), 0, int(k), 0) for i, k in zip(na, no)]
            rows += [(2, int(i), int(j), int(k), int(g)) for i, j, k, g in zip(a, b, o, ids)]
        prog = circ.__dict__["_gc_program"] = np.ascontiguousarray(np.array(rows, np.int32).reshape(-1, 5))
    return prog


def _native_run(nat, name: str, circ: Circuit, w: np.ndarray, tables: np.ndarray, *extra) -> None:
    import ctypes as C
    prog = _program(circ)
    nat.call(name, nat.ptr(_KEY_BYTES, C.c_ubyte), nat.ptr(prog, C.c_int32), len(prog), circ.and_count,
             circ.n_wires, w.shape[0], *(nat.ptr(e, C.c_uint64) for e in extra),
             nat.ptr(tables, C.c_uint64), nat.ptr(w, C.c_uint64))


def _mask(labels: np.ndarray) -> np.ndarray:
    """All-ones where the label's permute bit is set: (..., 1) uint64 for broadcasting."""
    return (np.uint64(0) - (labels[..., 0] & ONE64))[..., None]


def garble(circ: Circuit, r: np.ndarray, zeros: dict, native: bool | None = None) -> Garbled:
    w = wire_buffer(circ, zeros)
    batch = w.shape[0]
    tables = np.zeros((batch, circ.and_count, 2, 2), dtype=np.uint64)
    nat = _native_lib() if native is not False else None
    if nat is not None:
        _native_run(nat, "he_gc_garble", circ, w, tables, np.ascontiguousarray(r, np.uint64))
        out_zero = w[:, circ.outputs]
        return Garbled(tables, lsb(out_zero), out_zero, r)
    h = GateHash()
    for lin, a, b, o, ids, tw in _plan(circ, batch):
        for (xa, xb, xo), (na, no) in lin:
            w[:, xo] = w[:, xa] ^ w[:, xb]
            w[:, no] = w[:, na] ^ r
        k = len(o)
        if not k:
            continue
        a0, b0 = w[:, a], w[:, b]
        # one AES call for H(A0, j), H(B0, j'), H(A1, j), H(B1, j')
        lab = np.concatenate([a0, b0, a0 ^ r, b0 ^ r], axis=1)
        hh = h(lab, np.concatenate([tw, tw], axis=1))
        ha0, hb0, ha1, hb1 = hh[:, :k], hh[:, k:2 * k], hh[:, 2 * k:3 * k], hh[:, 3 * k:]
        ma, mb = _mask(a0), _mask(b0)
        tg = ha0 ^ ha1 ^ (mb & r)
        te = hb0 ^ hb1 ^ a0
        w[:, o] = ha0 ^ (ma & tg) ^ hb0 ^ (mb & (te ^ a0))
        tables[:, ids, 0] = tg
        tables[:, ids, 1] = te
    out_zero = w[:, circ.outputs]
    return Garbled(tables, lsb(out_zero), out_zero, r)


def _mul(bits: np.ndarray, lab: np.ndarray) -> np.ndarray:
    return lab & (np.uint64(0) - bits.astype(np.uint64))[..., None]


def evaluate(circ: Circuit, tables: np.ndarray, active: dict, native: bool | None = None) -> np.ndarray:
    """Evaluate with the active input labels; returns the active output labels."""
    w = wire_buffer(circ, active)
    batch = w.shape[0]
    nat = _native_lib() if native is not False else None
    if nat is not None:
        if tables.shape != (batch, circ.and_count, 2, 2):
            raise ShapeError(f"garbled tables of shape {tables.shape}, expected {(batch, circ.and_count, 2, 2)}")
        _native_run(nat, "he_gc_eval", circ, w, np.ascontiguousarray(tables, np.uint64))
        return w[:, circ.outputs]
    return _evaluate_wires(circ, tables, w)


def wire_buffer(circ: Circuit, labels: dict) -> np.ndarray:
    """The evaluator's wire array (batch, n_wires, 2) with the given input groups' labels in
    place (prepared offline for ``evaluate_opened``)."""
    batch = next(iter(labels.values())).shape[0]
    w = np.zeros((batch, circ.n_wires, 2), dtype=np.uint64)
    for name, lab in labels.items():
        w[:, circ.inputs[name]] = lab
    return w


def evaluate_opened(circ: Circuit, tables: np.ndarray, wires: np.ndarray, name: str, labels: np.ndarray,
                    coms: np.ndarray | None = None, values: np.ndarray | None = None,
                    native: bool | None = None) -> np.ndarray | None:
    """The evaluator's online step: the opened labels of input group ``name`` (batch, width, 2)
    go into ``wires`` (from ``wire_buffer``; overwritten), each checked first against its
    commitment ``coms`` (batch, width, 2, 32) at bit j of ``values`` (batch,) when given;
    then evaluation. Returns the output labels (batch, n_out, 2), or None if a label does not
    match its commitment (nothing is evaluated then). Natively one call (no numpy step per
    operation on the online path)."""
    width = len(circ.inputs[name])
    labels = np.ascontiguousarray(labels, np.uint64)
    batch = wires.shape[0]
    if labels.shape != (batch, width, 2) or wires.shape != (batch, circ.n_wires, 2) or \
            tables.shape != (batch, circ.and_count, 2, 2) or (coms is not None and coms.shape != (batch, width, 2, 32)):
        raise ShapeError("evaluate_opened: inconsistent shapes")
    nat = _native_lib() if native is not False else None
    if nat is None:
        if coms is not None:
            bits = ((np.asarray(values, np.uint64)[:, None] >> np.arange(width, dtype=np.uint64)) & np.uint64(1))
            if not labels_match(labels, coms, bits, native=False):
                return None
        wires[:, circ.inputs[name]] = labels
        return _evaluate_wires(circ, tables, wires)
    import ctypes as C
    cache = circ.__dict__.setdefault("_gc_wires", {})   # int32 wire lists for the native call
    if name not in cache:
        cache[name] = np.ascontiguousarray(circ.inputs[name], np.int32)
    outs = circ.__dict__.get("_gc_outputs")
    if outs is None:
        outs = circ.__dict__["_gc_outputs"] = np.ascontiguousarray(circ.outputs, np.int32)
    out = np.empty((batch, len(circ.outputs), 2), np.uint64)
    bad = C.c_int(0)
    prog = _program(circ)
    vals = None if coms is None else np.ascontiguousarray(values, np.uint64)
    nat.call("he_gc_eval_opened", nat.ptr(_KEY_BYTES, C.c_ubyte), nat.ptr(prog, C.c_int32), len(prog),
             circ.and_count, circ.n_wires, batch, nat.ptr(np.ascontiguousarray(tables, np.uint64), C.c_uint64),
             nat.ptr(wires, C.c_uint64), nat.ptr(cache[name], C.c_int32), width, nat.ptr(labels, C.c_uint64),
             None if coms is None else nat.ptr(np.ascontiguousarray(coms, np.uint8), C.c_ubyte),
             None if vals is None else nat.ptr(vals, C.c_uint64), nat.ptr(_LABEL_PREFIX, C.c_ubyte),
             len(_LABEL_PREFIX), nat.ptr(outs, C.c_int32), len(circ.outputs), nat.ptr(out, C.c_uint64),
             C.byref(bad))
    return None if bad.value else out


class OpenedEvaluator:
    """``evaluate_opened`` without coms for one circuit, one set of tables and one wire
    buffer, with every argument of the native call converted once (offline): a numpy
    array's ctypes pointer costs ~17 us to make, and ``evaluate_opened`` makes eight per
    call (120 us of a 20 us evaluation of a 63-AND circuit). The caller writes the opened
    labels of group ``name`` into ``self.labels`` (and any other group into ``wires``),
    then calls; the result is ``self.out`` (batch, n_out, 2), overwritten by the next call.
    The numpy reference is used where the native library is not loaded."""

    def __init__(self, circ: Circuit, tables: np.ndarray, wires: np.ndarray, name: str) -> None:
        import ctypes as C
        batch = wires.shape[0]
        self.circ, self.name, self.wires = circ, name, wires
        self.tables = np.ascontiguousarray(tables, np.uint64)
        # (np.full writes the pages now; np.zeros would leave them to fault in on first use)
        self.labels = np.full((batch, len(circ.inputs[name]), 2), 0, np.uint64)
        self.out = np.full((batch, len(circ.outputs), 2), 0, np.uint64)
        if wires.shape != (batch, circ.n_wires, 2) or self.tables.shape != (batch, circ.and_count, 2, 2) \
                or not wires.flags.c_contiguous or wires.dtype != np.uint64:
            raise ShapeError("OpenedEvaluator: inconsistent shapes")
        nat = _native_lib()
        self._fn = None
        if nat is None:
            return
        self._keep = (np.ascontiguousarray(circ.inputs[name], np.int32), np.ascontiguousarray(circ.outputs, np.int32),
                      _program(circ))
        grp, outs, prog = self._keep
        self._bad = C.c_int(0)
        self._err = C.create_string_buffer(2048)
        self._args = (nat.ptr(_KEY_BYTES, C.c_ubyte), nat.ptr(prog, C.c_int32), len(prog), circ.and_count,
                      circ.n_wires, batch, nat.ptr(self.tables, C.c_uint64), nat.ptr(wires, C.c_uint64),
                      nat.ptr(grp, C.c_int32), len(grp), nat.ptr(self.labels, C.c_uint64), None, None,
                      nat.ptr(_LABEL_PREFIX, C.c_ubyte), len(_LABEL_PREFIX), nat.ptr(outs, C.c_int32),
                      len(outs), nat.ptr(self.out, C.c_uint64), C.byref(self._bad), self._err, len(self._err))
        self._fn = nat.load().he_gc_eval_opened

    def __call__(self) -> np.ndarray:
        if self._fn is None:
            self.out[...] = evaluate_opened(self.circ, self.tables, self.wires, self.name, self.labels, native=False)
        elif self._fn(*self._args) != 0:   # (the typed error: the same call through ``lib.call``)
            _native_lib().call("he_gc_eval_opened", *self._args[:-2])
        return self.out


class RippleEvaluator:
    """``OpenedEvaluator`` for ``circuit.msb_sub_ripple(l)`` alone, in the native kernel made
    for it (``he_gc_eval_ripple``, ``native/go/gc/ripple.go``): the same gates, gate ids,
    tweaks and hash, so the same output label, without the gate program, the wire array
    and the copy of the inputs into it (the generic call reads ~15 KB of them for 63 AND
    gates: after a wake-up its cost is those cache lines, not the AES). ``u3``: the labels
    of input u3 (batch, 1, 2), fixed offline. The caller writes the opened labels of u1 and
    u2 into ``self.u1`` and ``self.u2`` (batch, l, 2) and calls; the result is ``self.out``
    (batch, 1, 2), overwritten by the next call. Without the native library (or its
    kernel) it evaluates through ``OpenedEvaluator``: the same result."""

    def __init__(self, l: int, tables: np.ndarray, u3: np.ndarray) -> None:
        import ctypes as C
        if not 2 <= l <= 64:
            raise ShapeError(f"RippleEvaluator: width {l} outside 2..64")
        circ = self.circ = msb_sub_ripple(l)
        batch = tables.shape[0]
        self.tables = np.ascontiguousarray(tables, np.uint64)
        self.u3 = np.ascontiguousarray(u3, np.uint64)
        if self.tables.shape != (batch, l - 1, 2, 2) or self.u3.shape != (batch, 1, 2):
            raise ShapeError("RippleEvaluator: inconsistent shapes")
        # (np.full writes the pages now; np.zeros would leave them to fault in on first use)
        self.u1, self.u2 = (np.full((batch, l, 2), 0, np.uint64) for _ in range(2))
        self.out = np.full((batch, 1, 2), 0, np.uint64)
        nat = _native_lib()
        self._fn = None if nat is None else getattr(nat.load(), "he_gc_eval_ripple", None)
        if self._fn is None:
            self._wires = np.full((batch, circ.n_wires, 2), 0, np.uint64)
            self._wires[:, circ.inputs["u3"]] = self.u3
            self._ev = OpenedEvaluator(circ, self.tables, self._wires, "u1")
            return
        self._err = C.create_string_buffer(2048)
        arrays = (_KEY_BYTES, self.tables, self.u1, self.u2, self.u3, self.out)
        self._typed = (nat.ptr(_KEY_BYTES, C.c_ubyte), l, batch,
                       *(nat.ptr(a, C.c_uint64) for a in arrays[1:]))   # (``lib.call``'s error path)
        # the call itself through a prototype-less function object on ctypes values made now:
        # ctypes converts nothing per call (~3 us less than the declared argtypes' checks)
        self._fn = type(self._fn)(("he_gc_eval_ripple", nat.load()))
        self._fn.restype = C.c_int
        p = [C.c_void_p(a.ctypes.data) for a in arrays]
        self._args = (p[0], C.c_int(l), C.c_int(batch), *p[1:], self._err, C.c_int(len(self._err)))

    def __call__(self) -> np.ndarray:
        if self._fn is None:
            self._ev.labels[...] = self.u1
            self._wires[:, self.circ.inputs["u2"]] = self.u2
            self.out[...] = self._ev()
        elif self._fn(*self._args) != 0:   # (the typed error: the same call through ``lib.call``)
            _native_lib().call("he_gc_eval_ripple", *self._typed)
        return self.out


def _evaluate_wires(circ: Circuit, tables: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``evaluate`` on a filled wire array (numpy reference)."""
    h = GateHash()
    for lin, a, b, o, ids, tw in _plan(circ, w.shape[0]):
        for (xa, xb, xo), (na, no) in lin:
            w[:, xo] = w[:, xa] ^ w[:, xb]
            w[:, no] = w[:, na]
        k = len(o)
        if not k:
            continue
        la, lb = w[:, a], w[:, b]
        hh = h(np.concatenate([la, lb], axis=1), tw)
        t = tables[:, ids]
        w[:, o] = hh[:, :k] ^ (_mask(la) & t[:, :, 0]) ^ hh[:, k:] ^ (_mask(lb) & (t[:, :, 1] ^ la))
    return w[:, circ.outputs]


def decode(out_labels: np.ndarray, decode_bits: np.ndarray) -> np.ndarray:
    return lsb(out_labels) ^ decode_bits


def commit_labels(zero: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Hash commitments to both labels of every wire: (..., 2 bits, 32) uint8.

    Labels are uniformly random 128-bit strings, so H(label) hides them (random oracle)
    and the opening is the label itself."""
    return label_hash(np.stack([zero, zero ^ r], axis=-2))   # (..., 2, 32)


_LABEL_PREFIX = np.frombuffer(b"gc-com", np.uint8).copy()


def labels_match(labels: np.ndarray, coms: np.ndarray, bits: np.ndarray, native: bool | None = None) -> bool:
    """Whether every opened label (..., 2) is the one committed for its bit: ``coms``
    (..., 2, 32) from ``commit_labels``, ``bits`` (...) 0/1."""
    want = np.take_along_axis(coms, np.asarray(bits).astype(np.int64)[..., None, None], axis=-2)[..., 0, :]
    return label_hash(labels, native=native).tobytes() == np.ascontiguousarray(want, np.uint8).tobytes()


def label_hash(labels: np.ndarray, native: bool | None = None, prefix: bytes = b"gc-com") -> np.ndarray:
    """Per-label hash SHA-256(prefix || label): (..., 32). ``gc-com`` for the commitments
    opened labels are checked against, ``gc-out`` for output labels."""
    flat = np.ascontiguousarray(labels.reshape(-1, 2), np.uint64)
    out = np.empty((flat.shape[0], 32), dtype=np.uint8)
    nat = _native_lib() if native is not False else None
    if nat is not None:
        import ctypes as C
        pre = np.frombuffer(prefix, np.uint8).copy()
        nat.call("he_label_hash", nat.ptr(pre, C.c_ubyte), len(pre), nat.ptr(flat, C.c_uint64),
                 flat.shape[0], nat.ptr(out, C.c_ubyte))
        return out.reshape(labels.shape[:-1] + (32,))
    for i in range(flat.shape[0]):
        out[i] = np.frombuffer(hashlib.sha256(prefix + flat[i].tobytes()).digest(), np.uint8)
    return out.reshape(labels.shape[:-1] + (32,))
