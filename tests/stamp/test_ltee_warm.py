"""The device's warm-up of shipped specs on a scratch twin (``ltee_warm``; docs/protocols/
stamp.md "Tenth pass"): the request handlers run before the query on public dummy keys, and
nothing of the device itself changes -- its counters, operation counts, AES total, output
flag and the answers of its real requests are those of a device that was not warmed."""

import json

import numpy as np
import pytest

from secinfer.arith.fixed import FixedPointConfig
from secinfer.crypto.prg import PRF
from secinfer.protocols.stamp import ltee_device as ld

RELU = {"out_shape": [1, 12], "params": [[12]], "shape": [1, 12], "steps": [
    {"op": "trunc"}, {"axis": -1, "op": "bias", "param": 0},
    {"node": {"attrs": {}, "inputs": ["g"], "name": "relu", "op": "Relu", "outputs": ["h"]}, "op": "node", "params": []}]}
OUT = {"out_shape": [1, 5], "params": [[5]], "shape": [1, 5], "steps": [{"op": "trunc"},
       {"axis": -1, "op": "bias", "param": 0}]}


def _u8(spec):
    return np.frombuffer(json.dumps(spec, sort_keys=True).encode(), dtype=np.uint8)


def _device(index, malicious=False):
    d = ld.start()
    ld.serve(d, "ready", [])
    d.index, d.out_party, d.malicious, d.session = index, 1, malicious, bytes(range(16))
    d.cfg = FixedPointConfig("device", 32, 13)
    for j in range(3):
        d._keys[j] = bytes([j + 40]) * 16
        d._prf[j] = PRF(d._keys[j])
    return d


def _state(d):
    return (dict(d.ctr), d.op_last, d.op_n, dict(d.op_base), set(d.used), dict(d.reserved), d.output_done,
            d.cnt.int_ops, d.cnt.float_ops, d.cnt.exp_ops, d.aes_bytes, dict(d._keys))


def _requests(d):
    rng = np.random.default_rng(3)
    out = []
    for k, (cmd, spec, mode) in enumerate((("eval", RELU, 0), ("eval", RELU, 1), ("output", OUT, 0))):
        n_in = 12 + 12 if spec is RELU else 5 + 5
        n_op = ld.SLOTS * n_in
        meta = [k, n_op, k * n_op, 0, mode] + ([0] if cmd == "eval" else [])
        s = rng.integers(0, 1 << 32, n_in, dtype=np.uint64).astype(np.uint32)
        out.append(ld.serve(d, cmd, [np.array(meta, dtype=np.int64), _u8(spec), s]))
    return out


@pytest.mark.parametrize("malicious", [False, True])
def test_warm_runs_the_handlers_on_a_scratch_twin_and_changes_nothing(malicious):
    for index in (0, 1):
        cold, warmed = _device(index, malicious), _device(index, malicious)
        before = _state(warmed)
        assert ld.serve(warmed, "specs", [_u8(RELU), _u8(OUT)])[0] == "ok"
        assert _state(warmed) == before
        s = warmed.scratch
        assert s is not None and s is not warmed and s._keys != warmed._keys
        assert s.op_last >= 1 and s.cnt.int_ops > 0        # the handlers ran there
        assert s.specs is warmed.specs and s.chains is warmed.chains
        ld.serve(cold, "specs", [])                        # (no spec: nothing parsed, nothing warmed)
        assert cold.scratch is None
        got_cold, got_warm = _requests(cold), _requests(warmed)
        for (t1, r1), (t2, r2) in zip(got_cold, got_warm):
            assert t1 == t2 and len(r1) == len(r2) and all(np.array_equal(a, b) for a, b in zip(r1, r2))
        assert _state(cold)[:-1] == _state(warmed)[:-1]
        assert any(t == "ok" for t, _ in got_warm)
