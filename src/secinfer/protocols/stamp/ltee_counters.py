"""The LTEE emulation's counter discipline [STAMP Protocols 2-3, 4.2] and its refusal.

Every mask request names its operation number, the counter it expects and a job slot; an
operation covers counters [ctr, ctr + n_op) of every stream, split into ``SLOTS`` equal
slots. ``CounterDiscipline`` keeps the device's counters and the operation under way, and
the operations reserved ahead of time (``ltee_device.cmd_prefetch``); see
docs/protocols/stamp.md, "GenMask / GenMaskShare with counters".
"""

from __future__ import annotations

import numpy as np

from secinfer.protocols.stamp.ltee_bus import SLOTS


class Refused(Exception):
    """The device refuses a request (reported to the host as a 'refused' frame)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}")
        self.code, self.detail = code, detail



class CounterDiscipline:
    """Mixin of ``ltee_device.Device``: the state is ``ctr`` (stream -> next free counter),
    ``op_last``, ``op_n``, ``op_base``, ``used``, ``reserved`` and ``_prefetching``."""

    def _begin(self, meta: np.ndarray, purpose: str, stream: tuple) -> int:
        """Counter discipline [Protocols 2-3]. meta = [op, n_op, ctr, sub, ...].

        An operation covers counters [ctr, ctr + n_op) of every stream, split into three
        equal slots, one per job ``sub`` (the three batch parts of [STAMP 4.2]). The first request
        of a new operation may move the counters forward (never back); an older
        operation, a counter below the device's, a counter that differs from the
        operation's, or a second request of the same kind for the same slot is refused.
        Returns the first counter of the request's slot on ``stream``."""
        return self._begin_ints(int(meta[0]), int(meta[1]), int(meta[2]), int(meta[3]), purpose, stream)

    def _begin_ints(self, op: int, n_op: int, ctr: int, sub: int, purpose: str, stream: tuple) -> int:
        """``_begin`` on the meta's first four fields already read as Python ints (a bound
        request of ``ltee_bound`` has them from its announcement, byte-equal to the live meta)."""
        if op < self.op_last:
            raise Refused("stale-counter", f"operation {op} is older than {self.op_last}")
        if not 0 <= sub < SLOTS or n_op % SLOTS or not 0 <= n_op <= 1 << 40:
            raise Refused("bad-request", "operation size or slot")
        if self._prefetching:
            return self._reserve(op, n_op, ctr, sub, purpose, stream)
        if op > self.op_last:
            for k in [k for k in self.reserved if k < op]:   # reserved and never run: consumed
                self._advance(self.reserved.pop(k))
            got = self.reserved.pop(op, None)
            if got is not None:   # reserved ahead (``cmd_prefetch``): the same size and counter
                if n_op != got[0] or ctr != got[1]:
                    raise Refused("stale-counter", f"operation {op} differs from its reservation")
                used = got[2]
            else:
                if ctr < self.ctr[stream]:
                    raise Refused("stale-counter", f"counter {ctr} is below the device's {self.ctr[stream]}")
                if self.reserved and ctr + n_op > min(r[1] for r in self.reserved.values()):
                    raise Refused("stale-counter", f"operation {op} overlaps a reserved one")
                used = set()
            self.op_base = dict.fromkeys(self.ctr, ctr)
            self._advance([n_op, ctr])   # every counter advances by n [STAMP 4.2]
            self.op_last, self.op_n, self.used = op, n_op, used
        elif n_op != self.op_n:
            raise Refused("stale-counter", "operation size differs from its first request")
        if ctr != self.op_base[stream]:
            raise Refused("stale-counter", f"counter {ctr} does not match the device's {self.op_base[stream]}")
        if (purpose, sub) in self.used:
            raise Refused("stale-counter", f"{purpose} already served for operation {op} slot {sub}")
        self.used.add((purpose, sub))
        return self._slot(stream, sub)

    def _reserve(self, op: int, n_op: int, ctr: int, sub: int, purpose: str, stream: tuple) -> int:
        """``_begin`` for a seed request of a *future* operation (``cmd_prefetch``): the same
        discipline, moved ahead. A reserved operation is newer than every operation begun or
        reserved before it, its counter range [ctr, ctr + n_op) starts at or above the
        device's counters and every reserved range (an operation begun later without a
        reservation must fit below the reserved ranges, ``_begin``), and each kind of
        request is served once per slot -- the marks carry over to the operation when it
        runs, which must then name the same counter and size. Returns the first counter of
        the request's slot on ``stream``."""
        if op <= self.op_last:
            raise Refused("stale-counter", f"operation {op} is not ahead of {self.op_last}")
        got = self.reserved.get(op)
        if got is None:
            if self.reserved and op < max(self.reserved):
                raise Refused("stale-counter", f"operation {op} is older than a reserved one")
            floor = max([self.ctr[stream]] + [r[1] + r[0] for r in self.reserved.values()])
            if ctr < floor:
                raise Refused("stale-counter", f"counter {ctr} is below the device's {floor}")
            got = self.reserved[op] = [n_op, ctr, set()]
        elif n_op != got[0] or ctr != got[1]:
            raise Refused("stale-counter", f"operation {op} differs from its reservation")
        if (purpose, sub) in got[2]:
            raise Refused("stale-counter", f"{purpose} already served for operation {op} slot {sub}")
        got[2].add((purpose, sub))
        return ctr + sub * (n_op // SLOTS)

    def _advance(self, r: list) -> None:
        """Counters past the range of operation ``r`` = [n_op, first counter, ...]."""
        top, ctr = r[1] + r[0], self.ctr
        for k in ctr:
            if ctr[k] < top:
                ctr[k] = top

    def _slot(self, stream: tuple, sub: int) -> int:
        return self.op_base[stream] + sub * (self.op_n // SLOTS)

    def _slot_size(self) -> int:
        return self.op_n // SLOTS

