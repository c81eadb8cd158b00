"""The bench's oracle check (bench/safhire_suite._oracle_check) can tell a right run from a
wrong one: final integers exactly, every round's values as a multiset (the client sees
them shuffled)."""

from __future__ import annotations

import numpy as np

from secinfer.bench.safhire_suite import _oracle_check
from secinfer.protocols.safhire.protocol import quantized_model

from .qhelpers import digits


def test_oracle_check_accepts_shuffled_rounds_and_refuses_a_changed_value(tmp_path):
    g, x, _ = digits("digits-mlp")
    qm = quantized_model(g, {"b": 12}, {"qcache": str(tmp_path)})
    xs = x[300:301]
    tr: list = []
    final = qm.run_int(qm.quantize_input(xs)[0], tr)
    rng = np.random.default_rng(0)
    shuffled = [rng.permutation(qm.rounds[k].layout(t)).tolist() for k, t in enumerate(tr)]
    ok = _oracle_check(g, 12, xs, [final.tolist()], str(tmp_path), shuffled)
    assert ok["oracle_equal"] and ok["oracle_rounds_equal"] and ok["oracle_rounds_checked"] == len(tr)
    bad_final = final.copy()
    bad_final[0] += 1
    assert _oracle_check(g, 12, xs, [bad_final.tolist()], str(tmp_path))["oracle_equal"] is False
    shuffled[0][3] += 1
    res = _oracle_check(g, 12, xs, [final.tolist()], str(tmp_path), shuffled)
    assert res["oracle_rounds_equal"] is False and res["oracle_rounds_differing"] == [0]
