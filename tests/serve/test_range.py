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
