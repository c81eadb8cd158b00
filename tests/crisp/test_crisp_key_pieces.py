"""Gate keys delivered and consumed in pieces (offline.KEY_PIECE): exact outputs, every
piece consumed exactly once, and a piece the plan does not expect is refused."""

from __future__ import annotations

import os
import sys

import numpy as np

from secinfer.arith.fixed import FX64
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model

sys.path.insert(0, os.path.dirname(__file__))
from crisp_helpers import run_crisp  # noqa: E402

MLP = load_model(bundled.bundled_path("digits-mlp"))
X, _ = bundled.bundled_testset("digits-mlp")


def test_small_key_pieces_exact_and_all_consumed(monkeypatch):
    from secinfer.protocols.crisp import offline

    monkeypatch.setattr(offline, "KEY_PIECE", 7)     # digits-mlp batch 2: 64- and 20-gate batches
    assert offline.key_pieces(64) == [7] * 9 + [1] and offline.key_pieces(7) == [7]
    x = X[:2]
    res = run_crisp(MLP, x)
    assert not isinstance(res["server"], BaseException), res["server"]
    assert not isinstance(res["client"], BaseException), res["client"]
    np.testing.assert_array_equal(res["client"].output_ring, run_fixed(MLP, x, FX64))
    by_gate = res["dealer"].info["key_bytes_by_gate"]
    assert sum(v["bytes_both"] for v in by_gate.values()) == res["dealer"].info["key_bytes"]
