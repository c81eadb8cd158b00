"""`secinfer run / inspect` know safhire (two processes over TCP, the secure default ring)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from secinfer.protocols.safhire.lwe import fast_available
from tests.safhire.qhelpers import digits
from tests.safhire.test_protocol import _oracle


def _cli(*args, timeout=300):
    p = subprocess.run([sys.executable, "-m", "secinfer.cli.main", *args], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def test_run_one_sample_equals_the_quantized_oracle(tmp_path):
    g, x, _ = digits("digits-mlp")
    one = tmp_path / "one.npy"
    np.save(one, x[7])
    rc, so, se = _cli("run", "-p", "safhire", "-m", "bundled:digits-mlp", "-i", str(one), "--option", "b=8",
                      "--option", "gamma=0", "--json")
    assert rc == 0, se
    out = np.asarray(json.loads(so)["output"])
    assert out.shape == (1, 10)
    np.testing.assert_array_equal(out, _oracle(g, {"b": 8}).run(x[7:8]))


def test_run_refuses_bad_options_and_warns_on_shuffle_off(tmp_path):
    g, x, _ = digits("digits-mlp")
    one = tmp_path / "one.npy"
    np.save(one, x[7])
    rc, _, se = _cli("run", "-p", "safhire", "-m", "bundled:digits-mlp", "-i", str(one), "--option", "b=9")
    assert rc != 0 and "b must be 8, 12 or 16" in se
    rc, so, se = _cli("run", "-p", "safhire", "-m", "bundled:digits-mlp", "-i", str(one), "--option", "gamma=1")
    if fast_available():
        assert rc == 0, se
    else:
        assert rc != 0 and "partial trace" in se
    rc, _, se = _cli("run", "-p", "safhire", "-m", "bundled:digits-mlp", "-i", str(one), "--option", "shuffle=off",
                     "--option", "b=8")
    assert rc == 0 and "INSECURE" in se


def test_inspect_shows_quantized_accuracy_and_dp():
    rc, so, se = _cli("inspect", "bundled:digits-mlp")
    assert rc == 0, se
    assert "safhire     semi-honest  yes" in so
    assert "b=8" in so and "b=16" in so and "accuracy" in so and "Theorem 2" in so
