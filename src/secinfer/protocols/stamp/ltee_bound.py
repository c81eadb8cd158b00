"""The LTEE emulation's announced online requests bound before the query (``ltee_device``):
what an announced ``eval`` / ``output`` dispatch can prepare from its public header and spec.

``ltee_ahead`` computes an announced request's stream seeds and expansions before the query;
its online dispatch still ran the general path: the spec's bytes looked up, the checks that
depend on the header and spec only, the seeds' dictionary, the zero-sharing's subtraction of
two expansions, the answer's seed array. Everything of that is a function of the device's keys
and state fixed at initialisation (index, output party, security setting, ring) and of the
request's meta and spec -- so ``cmd_expect`` runs it once per announced request and keeps a
``Bound`` record: the meta's fields as ints, the spec's chain, the payload's and result's
sizes, the unmasking vector (the mask of stream d-1, or our zero-sharing component), the
result's zero-sharing component, the answer's seed array and the AES bytes to charge.

Online, a request is bound only when its meta and spec are *byte-equal* to the announced
ones (1-d int64 meta, 1-d uint8 spec; the dictionary key is those bytes): then every check of
the general path that reads only them passed at the announcement and would pass again, and
the dispatch runs the checks that read the device's live state exactly as before --
``_need_ready``, the counter discipline (``_begin_ints``: stale counters, slots, each kind once
per slot), the output step's once-per-session rule, the payload's shape and type, the chain's
range guard -- then the bound steps. Anything else (no announcement, another meta or spec, the
malicious setting, a two-limb ring, a request ``ltee_ahead`` does not keep) goes the general
path. A record is used at most once (taken when matched, whatever follows). The answers, the
operation counts and the AES total equal the general path's bit for bit
(tests/stamp/test_ltee_bound.py).
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.errors import FixedPointRangeError, ProtocolError
from secinfer.protocols.stamp.ltee_bus import SLOTS, seeds_array
from secinfer.protocols.stamp.ltee_counters import Refused

BOUND_MAX_WORDS = 1 << 22       # 64-bit words the bound records hold at once (32 MiB)


class Bound:
    """One announced request, prepared (``BoundRequests._bind``)."""

    __slots__ = ("cmd", "ints", "purpose", "stream", "slot", "n_in", "n_out", "chain", "unmask",
                 "zero_out", "seeds", "aes_in", "aes_out", "kept", "mask")

    def __init__(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


class BoundRequests:
    """Mixin of ``ltee_device.Device``: ``_bound`` ((cmd, meta bytes, spec bytes) -> ``Bound``),
    filled by ``ltee_ahead.AheadMemo.cmd_expect`` (``_bind``) and taken by ``run_bound``."""

    def _init_bound(self) -> None:
        self._bound: dict = {}
        self._bound_words = 0

    def _clear_bound(self) -> None:
        self._bound.clear()
        self._bound_words = 0

    def _kept(self, j: int, label: str, ctr: int, n: int):
        """(seed, its kept expansion) of ``ltee_ahead``, or None when it was not kept."""
        seed = self._kept_seeds.get((j, label, ctr))
        if seed is None:
            return None
        v = self._kept_streams.get((seed, n)) if n else np.zeros(0, dtype=np.uint64)
        return None if v is None else (seed, v)

    def _bind(self, cmd: str, meta: np.ndarray, key: bytes, spec: dict, kernels) -> None:
        """Prepare announced request (cmd, meta, spec bytes ``key``) if every input-independent
        part of its dispatch is known: the same conditions as ``ltee_ahead._ahead_of`` and the
        general path's static checks (a request that would be refused is not bound)."""
        ring = self.cfg.ring
        if self.malicious or ring.limbs != 1 or meta.ndim != 1:
            return
        m = [int(v) for v in meta]
        d = self.index
        if len(m) < 5 or m[0] < 0:
            return
        op, n_op, ctr, sub = m[:4]
        if not 0 <= sub < SLOTS or n_op <= 0 or n_op % SLOTS or n_op > 1 << 40 or not 0 <= ctr < 1 << 63:
            return
        size = n_op // SLOTS
        slot = ctr + sub * size
        try:
            n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
            n_out = math.prod(kernels.out_shape(spec))
            steps = [st.get("op") for st in spec["steps"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            return
        if n_in > size or n_out > size:
            return
        mask = ring.mask
        if cmd == "output":
            if len(m) != 5 or m[4] != 0 or d != self.out_party:
                return
            if steps and steps[0] == "shadow-check":
                steps = steps[1:]
            if steps not in (["trunc"], ["trunc", "bias"]):
                return
            got = [self._kept(c, f"fin/{d}", slot, n_in) for c in (d, (d + 1) % 3)]
            if None in got:
                return
            unmask = (got[0][1] - got[1][1]) & mask
            rec = dict(purpose="output", stream=("s", 0), aes_in=32 + 16 * n_in, n_out=n_out,
                       zero_out=None, seeds=None, aes_out=0, kept=[(s, n_in) for s, _ in got])
        else:
            if len(m) != 6 or m[5] != 0 or m[4] not in (0, 1) or spec.get("act") or steps == ["softmax"]:
                return
            if m[4] == 0:
                j = (d - 1) % 3
                got = [self._kept(j, "m/0", slot, n_in)]
                if None in got:
                    return
                unmask = (np.uint64(0) - got[0][1]) & mask      # x = s - (F & mask) = s + (-F & mask)
                purpose, stream, aes_in = "eval", (f"k{j}", 0), 16 + 8 * n_in
            else:
                got = [self._kept(c, f"in/{d}", slot, n_in) for c in (d, (d + 1) % 3)]
                if None in got:
                    return
                unmask = (got[0][1] - got[1][1]) & mask
                purpose, stream, aes_in = "eval", ("s", 0), 32 + 16 * n_in
            t = (d + 1) % 3
            outs = [self._kept(c, f"out/{t}", slot, n_out if c in (t, (t + 1) % 3) else 0) for c in range(3)]
            if None in outs:
                return
            zero_out = (outs[t][1] - outs[(t + 1) % 3][1]) & mask
            if ring.bits == 32:     # the answer's uint32 narrowing (``serve``) folded into its addition
                zero_out = zero_out.astype(np.uint32)
            rec = dict(purpose=purpose, stream=stream, aes_in=aes_in, n_out=n_out, zero_out=zero_out,
                       seeds=seeds_array({c: outs[c][0] for c in (d, (d + 1) % 3)}), aes_out=48 + 16 * n_out,
                       kept=[(s, n_in) for s, _ in got] + [(outs[c][0], n_out) for c in (t, (t + 1) % 3)])
        words = n_in + (n_out if cmd == "eval" else 0)
        if self._bound_words + words > BOUND_MAX_WORDS:
            return
        try:
            chain = self._chain_of(kernels, key, spec)
        except (ProtocolError, ValueError, KeyError, TypeError, IndexError):
            return
        self._bound[(cmd, meta.tobytes(), key)] = Bound(
            cmd=cmd, ints=(op, n_op, ctr, sub), slot=slot, n_in=n_in, chain=chain, unmask=unmask, mask=mask,
            **rec)
        self._bound_words += words

    def run_bound(self, cmd: str, arrays: list):
        """The dispatch of a bound request (``ltee_device.serve``): its results, or None when
        the request is not byte-equal to an announced one (the general path serves it)."""
        if len(arrays) != 3:
            return None
        meta, raw = arrays[0], arrays[1]
        if (type(meta) is not np.ndarray or meta.dtype != np.int64 or meta.ndim != 1
                or type(raw) is not np.ndarray or raw.dtype != np.uint8 or raw.ndim != 1):
            return None
        b = self._bound.pop((cmd, meta.tobytes(), raw.tobytes()), None)
        if b is None:
            return None
        self._bound_words -= b.n_in + (b.n_out if b.zero_out is not None else 0)
        for k in b.kept:        # ``ltee_ahead``'s expansions this record was made from: taken
            if self._kept_streams.pop(k, None) is not None:
                self._kept_words -= k[1]
        self._need_ready()
        if cmd == "output":
            if self.output_done:
                raise Refused("policy", "the output was already released in this session")
        ctr = self._begin_ints(*b.ints, b.purpose, b.stream)
        if ctr != b.slot:   # (``_begin`` returns the announced slot for a request it passes)
            raise ProtocolError("bound request: counter slot differs from its announcement")
        if cmd == "output":
            self.output_done = True
        s = arrays[2]
        if type(s) is not np.ndarray or s.shape != (b.n_in,) or s.dtype not in (np.uint32, np.uint64):
            raise Refused("bad-request", "payload shape or type")
        self.aes_bytes += b.aes_in
        x = np.add(s, b.unmask, dtype=np.uint64)
        x &= b.mask
        cnt = self.cnt
        cnt.int_ops += b.n_in
        try:
            y = b.chain(x, cnt).reshape(-1)
        except FixedPointRangeError as e:
            raise Refused("range", str(e)[:1500]) from None
        if cmd == "output":
            return [y]
        if y.size != b.n_out:
            raise ProtocolError("bound request: the chain's output differs from its spec's shape")
        self.aes_bytes += b.aes_out
        if b.zero_out.dtype == np.uint32:   # a 32-bit ring: (y + z) mod 2^32 at once, as ``serve`` sends it
            real = np.add(y, b.zero_out, dtype=np.uint32, casting="unsafe")
        else:
            real = np.add(y, b.zero_out, dtype=np.uint64)
            real &= b.mask
        cnt.int_ops += 2 * b.n_out
        return [b.seeds, real]
