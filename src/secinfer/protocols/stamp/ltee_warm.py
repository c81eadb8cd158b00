"""The LTEE emulation's warm-up of an operation spec before the online phase
(``ltee_device.cmd_specs``; docs/protocols/stamp.md, "Eighth pass" and "Tenth pass").

The first time a process runs a piece of Python it runs it slower (cold caches, the
interpreter's specialisation of each code object after its first runs): a device's first
online ``eval`` or ``output`` used to cost ~0.2-0.3 ms more than the next one. Two warm-ups,
both on data that is public and on state that is not the device's:

* the spec's chain on zeros (a throwaway operation count) and the unmasking's expansion on
  public dummy seeds;
* the very request handlers (``serve`` and ``cmd_eval`` / ``cmd_output``) on a *scratch*
  device: a second ``Device`` of the same class, index, ring and session parameters but
  public dummy keys and counters of its own, which nobody can ask anything and whose
  answers are dropped. The device's own keys, counters, operation counts, release state and
  output flag are never touched; the scratch shares only the parsed specs and chains
  (validated, immutable in use).
A chain or request that does not run on zeros (a range guard's check, the softmax path, a
malicious output without MACs) is refused or raises there and is simply not warmed further.
"""

from __future__ import annotations

import math

import numpy as np

from secinfer.crypto.prg import PRF
from secinfer.errors import FixedPointRangeError, ProtocolError
from secinfer.protocols.stamp.ltee_bus import SLOTS, zero_component
from secinfer.protocols.stamp.ltee_requests import _OpCount

DUMMY_SEEDS = {c: bytes(16) for c in range(3)}      # public: the warm-up's stand-in stream seeds
_DUMMY_KEYS = {j: bytes([0xD0 + j]) * 16 for j in range(3)}   # public: the scratch device's keys
WARM_MAX = 1 << 20          # elements: larger specs are parsed, not run, before the query
# (eval mode, hat) of the requests a spec may be sent with online (``cmd_eval``)
_EVAL_MODES = ((0, 0), (0, 1), (1, 0))


def warm(dev, kernels, key: bytes, spec: dict, serve) -> None:
    """Parse the spec's chain for ``dev`` (``_chain_of``: the online request reuses it, whatever
    its size) and warm the code its online requests run (module docstring). ``serve``:
    ``ltee_device.serve``, the dispatch both emulations run."""
    n_in = math.prod(spec["shape"]) + kernels.n_params(spec)
    try:
        chain = dev._chain_of(kernels, key, spec)
        if n_in > WARM_MAX:
            return
        ring = dev.cfg.ring
        chain(ring.add(np.zeros(n_in, dtype=np.uint64), zero_component(DUMMY_SEEDS, 0, n_in, ring.mask)), _OpCount())
    except (ProtocolError, FixedPointRangeError, ValueError, IndexError, KeyError, TypeError):
        return
    try:
        _warm_requests(dev, kernels, key, spec, n_in, serve)
    except Exception:  # noqa: BLE001 - a warm-up never fails the device; the online request reports
        pass


def _scratch(dev):
    """The device's scratch twin (made once): same class, index, ring, output party and
    security; public dummy keys, its own counters; the parsed specs and chains shared."""
    s = dev.scratch
    if s is None:
        s = dev.scratch = type(dev)()
        s.index, s.session, s.cfg = dev.index, bytes(16), dev.cfg
        s.out_party, s.malicious = dev.out_party, dev.malicious
        s._keys = dict(_DUMMY_KEYS)
        s._prf = {j: PRF(k) for j, k in _DUMMY_KEYS.items()}
        s.specs, s.chains = dev.specs, dev.chains
    return s


def _warm_requests(dev, kernels, key: bytes, spec: dict, n_in: int, serve) -> None:
    s = _scratch(dev)
    n_op = SLOTS * max(n_in, math.prod(kernels.out_shape(spec)))
    blob = np.frombuffer(key, dtype=np.uint8)
    payload = np.zeros(n_in, dtype=np.uint32 if dev.cfg.ring_bits <= 32 else np.uint64)
    steps = [st.get("op") for st in spec["steps"]]
    if steps and steps[0] == "shadow-check":
        steps = steps[1:]
    if steps == ["softmax"]:
        return
    if steps in (["trunc"], ["trunc", "bias"]) and s.index == s.out_party:
        s.output_done = False
        meta = np.array([s.op_last + 1, n_op, max(s.ctr.values()), 0, int(s.malicious)], dtype=np.int64)
        extra = [] if not s.malicious else [payload, np.zeros(16, np.uint8), np.zeros(16, np.uint8)]
        serve(s, "output", [meta, blob, payload, *extra])
        return
    for mode, hat in _EVAL_MODES:
        meta = np.array([s.op_last + 1, n_op, max(s.ctr.values()), 0, mode, hat], dtype=np.int64)
        serve(s, "eval", [meta, blob, payload])
