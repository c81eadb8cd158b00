"""The LTEE emulation's input-independent work done before the query (``ltee_device``):
the stream seeds and AES-CTR expansions an announced online request will need.

An online ``eval`` or ``output`` spends most of its device time outside its chain: the
stream seeds F_k(label, ctr) (one AES block each) and their AES-CTR expansions -- the
unmasking of the payload and the zero-sharing of the result (docs/protocols/stamp.md,
"Twelfth pass": ~40 % of a W3 ``eval``'s dispatch in the device's own process). None of it
depends on the query: it is a function of the device's keys and of the request's public
header (operation, counter, slot, mode) and spec. The host's dry run knows those headers
(``StampOps.plan``), so it announces them before the online phase (``cmd_expect``), and
the device computes that material then.

What is kept is keyed by what determines it -- a seed by (key index, label, counter), an
expansion by (seed, length) -- so a kept value is taken only where the very same
computation would run, and is exactly its result (AES-CTR of that seed, ``ltee_bus.expand``).
An announcement is a hint, not an authorization: it changes no counter, releases nothing
(the command answers nothing) and grants nothing; every online request still passes
``_begin``'s counter discipline and its policy checks before anything computed from a kept
value leaves the device, and a wrong or hostile announcement only wastes the device's own
memory (bounded: ``AHEAD_MAX_WORDS``) on values nobody asks for. The device's operation and
AES counts are charged where the values are used, as before, so the meters do not move.
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.protocols.stamp.ltee_bus import EXPECT_MAX, SLOTS, expand
from secinfer.protocols.stamp.ltee_counters import Refused
from secinfer.protocols.stamp.ltee_requests import _blob, _kernels, _parse_spec

# announced requests: the command codes of ``cmd_expect``
EXPECTABLE = ("eval", "output")
AHEAD_MAX_WORDS = 1 << 22       # 64-bit words of expansions kept at once (32 MiB)


class AheadMemo:
    """Mixin of ``ltee_device.Device``: ``_kept_seeds`` ((j, label, ctr) -> 16-byte seed) and
    ``_kept_streams`` ((seed, n) -> n words of keystream), filled by ``cmd_expect`` and taken
    (removed) by ``_seed`` and ``_expand``."""

    def _init_ahead(self) -> None:
        self._kept_seeds: dict = {}
        self._kept_streams: dict = {}
        self._kept_words = 0
        self._left: int | None = None    # announced requests not served yet (None: no announcement)

    def spin_after(self, cmd: str) -> bool:
        """Whether to busy-poll for the next request after answering online request ``cmd``
        (``ltee_device.main``): yes unless the host announced its online requests
        (``cmd_expect``) and this was the last of them -- then nothing follows it soon, and a
        device spinning on one of two cores would only take that core from the parties still
        at work (p0's device after its last ``eval`` while p1 runs the output step)."""
        if self._left is None:
            return True
        if cmd in EXPECTABLE and self._left > 0:
            self._left -= 1
        return self._left > 0

    def _expand(self, seed: bytes, n: int) -> np.ndarray:
        """``expand(seed, n)``, taken from what ``cmd_expect`` kept when it is there."""
        if self._kept_streams:
            hit = self._kept_streams.pop((seed, n), None)
            if hit is not None:
                self._kept_words -= n
                return hit
        return expand(seed, n)

    def _zero(self, seeds: dict, comp: int, n: int) -> np.ndarray:
        """Component ``comp`` of a zero-sharing [STAMP Protocol 3] (``ltee_bus.zero_component``,
        the expansions through ``_expand``)."""
        mask = self.cfg.ring.mask
        return (self._expand(seeds[comp], n) - self._expand(seeds[(comp + 1) % 3], n)) & mask

    # ---- the announcement -------------------------------------------------------------------
    def cmd_expect(self, arrays):
        """Online requests the host will make, announced before its online phase: arrays[0] =
        int64 codes (``EXPECTABLE``), then per request its meta (int64, as the request will
        carry it) and its spec (uint8 JSON bytes). For each, the stream seeds and expansions
        the request will use are computed now and kept (``_kept_seeds``, ``_kept_streams``).
        Semi-honest requests of the replicated (mode 0) and 3-out-of-3 (mode 1) paths and the
        semi-honest output step; others are accepted and skipped. Malformed: ``Refused``.
        Changes no counter and no count, answers nothing."""
        self._need_ready()
        codes = arrays[0] if arrays else None
        if (not isinstance(codes, np.ndarray) or codes.dtype != np.int64 or codes.ndim != 1
                or codes.size > EXPECT_MAX or len(arrays) != 1 + 2 * codes.size):
            raise Refused("bad-request", "expect layout")
        kernels = _kernels()
        self._kept_seeds.clear()      # (a new announcement replaces what an older one left)
        self._kept_streams.clear()
        self._kept_words = 0
        self._left = codes.size
        self._clear_bound()
        todo, bind = [], []
        for k, code in enumerate(codes.tolist()):
            meta, raw = arrays[1 + 2 * k], arrays[2 + 2 * k]
            if not 0 <= code < len(EXPECTABLE):
                raise Refused("bad-request", "command not expectable")
            if not isinstance(meta, np.ndarray) or meta.dtype != np.int64 or meta.shape not in ((5,), (6,)):
                raise Refused("bad-request", "expect: a request's meta")
            key = _blob(raw)
            spec = _parse_spec(kernels, key, self.specs)
            todo += self._ahead_of(EXPECTABLE[code], [int(v) for v in meta], spec, kernels)
            bind.append((EXPECTABLE[code], meta, key, spec))
        aes = self.aes_bytes            # (charged when used, not now)
        try:
            for j, label, ctr, n in todo:
                seed = self._kept_seeds.get((j, label, ctr))
                if seed is None:
                    seed = self._kept_seeds[(j, label, ctr)] = self._seed(j, label, ctr)
                if n and (seed, n) not in self._kept_streams:
                    if self._kept_words + n > AHEAD_MAX_WORDS:
                        break
                    self._kept_streams[(seed, n)] = expand(seed, n)
                    self._kept_words += n
        finally:
            self.aes_bytes = aes
        for cmd, meta, key, spec in bind:    # their dispatch's input-independent part (``ltee_bound``)
            self._bind(cmd, meta, key, spec, kernels)
        return []

    def _ahead_of(self, cmd: str, m: list, spec: dict, kernels) -> list:
        """The (key index, label, counter, words) a request with meta ``m`` and ``spec`` will
        expand (words 0: the seed only), as ``cmd_eval`` / ``cmd_output`` compute them; [] for
        a request whose material is not kept. Counters are the slot's as ``_begin`` will
        return them for a request that passes it."""
        if self.malicious or len(m) < 5:
            return []
        d = self.index
        n_op, sub = m[1], m[3]
        if not 0 <= sub < SLOTS or n_op <= 0 or n_op % SLOTS:
            return []
        slot = m[2] + sub * (n_op // SLOTS)
        n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
        if n_in > n_op // SLOTS:
            return []
        if cmd == "output":
            if m[4] != 0 or d != self.out_party:
                return []
            return [(c, f"fin/{d}", slot, n_in) for c in (d, (d + 1) % 3)]
        if len(m) != 6 or m[5] != 0 or spec.get("act"):
            return []
        mode = m[4]
        if mode == 0:
            out = [((d - 1) % 3, "m/0", slot, n_in)]
        elif mode == 1:
            out = [(c, f"in/{d}", slot, n_in) for c in (d, (d + 1) % 3)]
        else:
            return []
        n_out = math.prod(kernels.out_shape(spec))
        if n_out > n_op // SLOTS:
            return out
        t = (d + 1) % 3
        return out + [(c, f"out/{t}", slot, n_out if c in (t, (t + 1) % 3) else 0) for c in range(3)]
