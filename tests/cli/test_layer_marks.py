"""Issue #21 item 5: the parties mark each layer as it starts, so the live progress of
`secinfer run` (the last mark of each party, runtime/progress.py) shows per-layer progress."""

import numpy as np
import pytest

import secinfer
from secinfer.ir import bundled


@pytest.mark.parametrize("protocol", ["stamp", "crisp"])
def test_every_layer_is_marked_in_order(recorded_marks, protocol):
    seen = recorded_marks
    x, _ = bundled.bundled_testset("digits-mlp")
    secinfer.run("bundled:digits-mlp", np.asarray(x[:1]), protocol=protocol, in_process=True, quiet=True)
    layers = {}
    for me, name in seen:
        if name.startswith("layer "):
            layers.setdefault(me, []).append(name)
    assert layers, seen
    for me, names in layers.items():
        ks = [int(n.split()[1].split("/")[0]) for n in names]
        total = int(names[0].split()[1].split("/")[1])
        # each step once, in order; a node fused into the step before it (STAMP's ReLU after a
        # product, a truncation) is not marked on its own, so the count may stop below the total
        assert ks == list(range(1, len(ks) + 1)) and len(ks) <= total, (me, names)
        assert len(ks) >= 3, names
