"""A small Bristol-like boolean circuit representation, a builder with constant folding, and
the comparison circuits of [ASTRA 5.4] (MSB through the optimised parallel-prefix adder of
ABY3: only the carry into the top bit is computed, about 2l AND gates, depth log2(l) + 1).

A circuit is a list of gates (op, in_a, in_b, out) with op in XOR / AND / INV over numbered
wires, named input groups and an output list. ``levels()`` groups gates by depth so garbling,
evaluation and secret-shared evaluation process a whole level with array operations
(an AND level is one communication round when the circuit is evaluated on shares).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from secinfer.errors import ConfigError

ZERO, ONE = -1, -2  # constant pseudo-wires (folded away by the builder)


@dataclass
class Circuit:
    n_wires: int
    gates: list                      # (op, a, b, out); b = -1 for INV
    inputs: dict                     # name -> list of wire ids (LSB first)
    outputs: list
    _levels: list | None = field(default=None, repr=False)

    @property
    def and_count(self) -> int:
        n = self.__dict__.get("_n_and")
        if n is None:
            n = self.__dict__["_n_and"] = sum(1 for g in self.gates if g[0] == "AND")
        return n

    @property
    def and_depth(self) -> int:
        return sum(1 for lv in self.levels() if len(lv["AND"][0]))

    def levels(self) -> list:
        """Gates grouped by AND-depth; within a level the XOR/INV gates come as ``lin`` steps
        (each step's inputs are ready), then the level's AND gates all together."""
        if self._levels is not None:
            return self._levels
        depth = np.zeros(self.n_wires, dtype=np.int64)   # AND depth of each wire
        sub = np.zeros(self.n_wires, dtype=np.int64)     # linear sub-step (0: not a linear output)
        per: dict[int, dict] = {}
        for op, a, b, out in self.gates:
            if op == "AND":
                d = max(depth[a], depth[b]) + 1
                depth[out], sub[out] = d, 0
                per.setdefault(d, {"lin": {}, "AND": []})["AND"].append((a, b, out))
                continue
            ins = (a, b) if b >= 0 else (a,)
            d = max(depth[i] for i in ins)
            # a linear gate runs in level d + 1, before that level's ANDs, after its linear inputs
            st = max((sub[i] if depth[i] == d else 0) for i in ins) + 1
            depth[out], sub[out] = d, st
            per.setdefault(d + 1, {"lin": {}, "AND": []})["lin"].setdefault(st, []).append((op, a, b, out))
        levels = []
        for d in sorted(per):
            steps = []
            for st in sorted(per[d]["lin"]):
                g = per[d]["lin"][st]
                xs = np.array([(x[1], x[2], x[3]) for x in g if x[0] == "XOR"], dtype=np.int64).reshape(-1, 3)
                ns = np.array([(x[1], x[3]) for x in g if x[0] == "INV"], dtype=np.int64).reshape(-1, 2)
                steps.append(((xs[:, 0], xs[:, 1], xs[:, 2]), (ns[:, 0], ns[:, 1])))
            arr = np.array(per[d]["AND"], dtype=np.int64).reshape(-1, 3)
            levels.append({"lin": steps, "AND": (arr[:, 0], arr[:, 1], arr[:, 2])})
        self._levels = levels
        return levels


class Builder:
    def __init__(self) -> None:
        self.n = 0
        self.gates: list = []
        self.inputs: dict = {}

    def _new(self) -> int:
        self.n += 1
        return self.n - 1

    def input(self, name: str, nbits: int) -> list:
        ws = [self._new() for _ in range(nbits)]
        self.inputs[name] = ws
        return ws

    def xor(self, a: int, b: int) -> int:
        if a == ZERO:
            return b
        if b == ZERO:
            return a
        if a == ONE:
            return self.inv(b)
        if b == ONE:
            return self.inv(a)
        if a == b:
            return ZERO
        o = self._new()
        self.gates.append(("XOR", a, b, o))
        return o

    def and_(self, a: int, b: int) -> int:
        if ZERO in (a, b):
            return ZERO
        if a == ONE:
            return b
        if b == ONE:
            return a
        if a == b:
            return a
        o = self._new()
        self.gates.append(("AND", a, b, o))
        return o

    def inv(self, a: int) -> int:
        if a == ZERO:
            return ONE
        if a == ONE:
            return ZERO
        o = self._new()
        self.gates.append(("INV", a, -1, o))
        return o

    def build(self, outputs: list) -> Circuit:
        if any(o < 0 for o in outputs):
            raise ConfigError("a circuit output folded to a constant")
        return Circuit(self.n, self.gates, self.inputs, outputs)


def csa(bld: Builder, x: list, y: list, z: list) -> tuple[list, list]:
    """Carry-save adder: x + y + z = s + 2c, one AND per bit (maj = x ^ ((x^y) & (x^z)))."""
    s, c = [], []
    for xi, yi, zi in zip(x, y, z):
        t = bld.xor(xi, yi)
        s.append(bld.xor(t, zi))
        c.append(bld.xor(xi, bld.and_(t, bld.xor(xi, zi))))
    return s, c


def msb_of_sum(bld: Builder, a: list, b: list, cin: int = ZERO) -> int:
    """MSB of a + b + cin via the parallel-prefix carry tree (ABY3's optimised PPA)."""
    n = len(a)
    if n == 1:
        return bld.xor(bld.xor(a[0], b[0]), cin)
    groups = []
    for i in range(n - 1):
        p = bld.xor(a[i], b[i])
        g = bld.and_(a[i], b[i])
        if i == 0 and cin != ZERO:
            g = bld.xor(g, p if cin == ONE else bld.and_(p, cin))
        groups.append([g, p])
    while len(groups) > 1:
        nxt = []
        for j in range(0, len(groups), 2):
            if j + 1 == len(groups):
                nxt.append(groups[j])
                continue
            (glo, plo), (ghi, phi) = groups[j], groups[j + 1]
            g = bld.xor(ghi, bld.and_(phi, glo))
            p = bld.and_(phi, plo) if j > 0 else None
            nxt.append([g, p])
        groups = nxt
    return bld.xor(bld.xor(a[n - 1], b[n - 1]), groups[0][0])


@lru_cache(maxsize=None)
def msb_sub_circuit(l: int) -> Circuit:
    """Semi-honest BitExt [ASTRA 5.4]: y = msb(u1 - u2) xor u3."""
    bld = Builder()
    u1, u2, u3 = bld.input("u1", l), bld.input("u2", l), bld.input("u3", 1)
    m = msb_of_sum(bld, u1, [bld.inv(w) for w in u2], ONE)
    return bld.build([bld.xor(m, u3[0])])


@lru_cache(maxsize=None)
def msb_sub3_circuit(l: int) -> Circuit:
    """Malicious BitExt [ASTRA 5.4]: y = msb(u1 - u2 - u3) xor u4 xor u5.

    u1 - u2 - u3 = u1 + ~u2 + ~u3 + 2 = s + (2c + 1) + 1 after one carry-save layer."""
    bld = Builder()
    u1, u2, u3 = bld.input("u1", l), bld.input("u2", l), bld.input("u3", l)
    u4, u5 = bld.input("u4", 1), bld.input("u5", 1)
    s, c = csa(bld, u1, [bld.inv(w) for w in u2], [bld.inv(w) for w in u3])
    m = msb_of_sum(bld, s, [ONE] + c[:-1], ONE)
    return bld.build([bld.xor(bld.xor(m, u4[0]), u5[0])])


@lru_cache(maxsize=None)
def msb_add3_circuit(l: int) -> Circuit:
    """ABY3 bit extraction: msb(x0 + x1 + x2) of a replicated arithmetic sharing."""
    bld = Builder()
    x0, x1, x2 = bld.input("x0", l), bld.input("x1", l), bld.input("x2", l)
    s, c = csa(bld, x0, x1, x2)
    return bld.build([msb_of_sum(bld, s, [ZERO] + c[:-1], ZERO)])


def bits_of(v: np.ndarray, l: int) -> np.ndarray:
    """(n,) uint64 -> (n, l) uint8, LSB first."""
    v = np.asarray(v, dtype=np.uint64)
    return ((v[:, None] >> np.arange(l, dtype=np.uint64)[None, :]) & np.uint64(1)).astype(np.uint8)


def eval_plain(circ: Circuit, inputs: dict) -> np.ndarray:
    """Plaintext evaluation over a batch: inputs name -> (batch, nbits) 0/1 arrays."""
    batch = next(iter(inputs.values())).shape[0]
    w = np.zeros((batch, circ.n_wires), dtype=np.uint8)
    for name, ws in circ.inputs.items():
        w[:, ws] = inputs[name]
    for lv in circ.levels():
        for (xa, xb, xo), (na, no) in lv["lin"]:
            w[:, xo] = w[:, xa] ^ w[:, xb]
            w[:, no] = w[:, na] ^ 1
        a, b, o = lv["AND"]
        w[:, o] = w[:, a] & w[:, b]
    return w[:, circ.outputs]


@lru_cache(maxsize=None)
def msb_sub_ripple(l: int) -> Circuit:
    """y = msb(u1 - u2) xor u3 (``msb_sub_circuit``'s function) with a ripple carry: l - 1
    AND gates instead of the parallel-prefix tree's ~3l (181 for l = 64). A garbled circuit
    pays per AND gate, not per level (the prefix tree's log depth is for the rounds of a
    secret-shared evaluation), so this is the comparison to garble: 63 AND gates, a third
    of the tables offline and of the evaluation online.
    u1 - u2 = u1 + ~u2 + 1; carry c_{i+1} = maj(u1_i, ~u2_i, c_i) = c ^ ((c ^ u1_i) & (c ^ ~u2_i))."""
    bld = Builder()
    u1, u2, u3 = bld.input("u1", l), bld.input("u2", l), bld.input("u3", 1)
    nb = [bld.inv(w) for w in u2]
    c = ONE
    for i in range(l - 1):
        c = bld.xor(c, bld.and_(bld.xor(c, u1[i]), bld.xor(c, nb[i])))
    return bld.build([bld.xor(bld.xor(bld.xor(u1[l - 1], nb[l - 1]), c), u3[0])])
