"""Served queries against the model owner's range certificate (docs/runtime.md "Serving",
"Range certificate"): the client checks its query before it opens a session."""

from __future__ import annotations

import numpy as np
import pytest

from secinfer.errors import FixedPointRangeError
from secinfer.runtime.serve import ServeClient
from secinfer.runtime.serve_client import RangeWarning

MODEL = "bundled:diabetes-linreg"
X = np.linspace(-0.01, 0.01, 10).reshape(1, 10)


def test_astra_out_of_range_query_refused_before_any_session(servers):
    """The issue's reproduction (x0 = 1000 wraps in astra's folded encoding): refused on the
    client, naming feature, value and bound, before any session, port or prepared item is spent;
    an in-range query then runs; the override warns and runs."""
    s = servers("astra", MODEL)
    s.wait_prep(1)
    before = {pid: s.status(pid) for pid in s.ids}
    bad = X.copy()
    bad[0, 0] = 1000.0
    with ServeClient(s.cluster, s.client) as c:
        cert = c.certificate()
        assert cert.violation(X) is None and cert.features == 10
        with pytest.raises(FixedPointRangeError, match=r"sample 0, feature 0 = 1000 .*outside.*certificate"):
            c.query(bad)
        with pytest.raises(FixedPointRangeError, match="NaN"):
            c.query(np.full((1, 10), np.nan), allow_out_of_range=True)    # never overridable
        after = {pid: s.status(pid) for pid in s.ids}
        for pid in s.ids:    # nothing opened, nothing refused, no prepared item taken
            assert after[pid]["opened"] == before[pid]["opened"] == 0, after[pid]
            assert after[pid]["prep"]["hits"] == before[pid]["prep"]["hits"]
            assert after[pid]["pool"]["taken"] == before[pid]["pool"]["taken"]
        r = c.query(X)
        assert r.info["range"] == "certified"
        with pytest.warns(RangeWarning, match="may be WRONG"):
            r2 = c.query(bad, allow_out_of_range=True)
        assert r2.info["range"] == "overridden"
    st = s.wait_settled()
    assert all(v["completed"] == 2 and v["failed"] == 0 for v in st.values()), st


def test_cli_query_refuses_out_of_range_and_the_override_warns(servers, tmp_path):
    import os
    import subprocess
    import sys

    from serve_helpers import SRC

    s = servers("reference", MODEL)
    bad = X.copy()
    bad[0, 2] = 1e12      # encodable under fx64f13, but its sum of products would wrap
    np.save(tmp_path / "bad.npy", bad)
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [sys.executable, "-m", "secinfer.cli.main", "query", "--cluster", str(s.cluster), "--id", s.client,
            "--input", str(tmp_path / "bad.npy"), "--json"]
    p = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "feature 2 = 1e+12" in p.stderr and "--allow-out-of-range" in p.stderr, p.stderr
    assert s.status(s.ids[0])["opened"] == 0
    p = subprocess.run(base + ["--allow-out-of-range"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "WARNING" in p.stderr and "may be WRONG" in p.stderr, p.stderr
    assert '"range": "overridden"' in p.stdout


def test_stamp_query_outside_the_certificate_runs_guarded(servers):
    """STAMP (Z_2^32): a real digits query is outside the certificate (interval analysis
    cannot prove the output layer) but inside the guarded regions: it is served with the
    range guard, bit-exact; a query whose sum wraps ends with the typed error naming the layer."""
    from secinfer.arith.fixed import FX32
    from secinfer.ir.bundled import bundled_path, bundled_testset
    from secinfer.ir.fixed_exec import run_fixed
    from secinfer.ir.onnx_import import load_model

    s = servers("stamp", "bundled:digits-mlp", peer_timeout=10.0, heartbeat_interval=0.5)
    x, _ = bundled_testset("digits-mlp")
    x = x[:1]
    with ServeClient(s.cluster, s.client) as c:
        cert = c.certificate()
        assert cert.violation(x) is not None and cert.guarded is not None
        r = c.query(x)
        assert r.info["range"] == "guarded"
        assert np.array_equal(r.output_ring, run_fixed(load_model(str(bundled_path("digits-mlp"))), x, FX32))
        with pytest.raises(FixedPointRangeError, match="layer 'fc0' left the 32-bit ring"):
            c.query(np.full((1, 64), 100.0))
        with pytest.raises(FixedPointRangeError, match="range guard covers"):
            c.query(np.full((1, 64), 1e4))          # its first product would wrap: refused before open
    st = s.wait_settled()
    assert all(v["completed"] == 1 and v["failed"] == 1 and v["opened"] == 2 for v in st.values()), st
