"""ASTRA as real processes over authenticated sockets (the launcher), not only in-memory."""

import importlib.resources as ir

import numpy as np
import pytest

from secinfer.runtime.launcher import run_local


@pytest.mark.parametrize("security", ["malicious", "fair"])
def test_astra_processes_bundled_logreg(security):
    base = ir.files("secinfer.ir") / "bundled"
    d = np.load(base / "breast_cancer_test.npz")
    x = d["X"][:12]
    res = run_local("astra", security, str(base / "cancer-logreg.onnx"), x, timeout=120)
    from secinfer.ir.float_exec import run_float
    from secinfer.ir.onnx_import import load_model
    ref = (run_float(load_model(str(base / "cancer-logreg.onnx")), x.astype(np.float32))[:, 0] > 0.5)
    assert np.array_equal(np.asarray(res.output)[:, 0], ref.astype(float))
    assert res.rounds["online"] >= 3 and res.bytes_by_phase["online"] > 0


@pytest.mark.parametrize("protocol,security", [("astra", "semi-honest"), ("astra", "malicious"),
                                               ("aby3", "semi-honest")])
def test_online_window_starts_no_later_than_the_client(protocol, security):
    """The launcher's online latency runs from the last party's entry into the online phase.
    Every server tells the client it is ready from inside its online phase (the message
    metered offline), so the client -- who starts its query only then -- is the last to
    enter: no server can enter after the client began (which hid the client's first steps
    from the window). The "ready" stays offline: its bytes do not count online."""
    base = ir.files("secinfer.ir") / "bundled"
    x = np.load(base / "breast_cancer_test.npz")["X"][:2]
    res = run_local(protocol, security, str(base / "cancer-logreg.onnx"), x, timeout=120)
    win = {r: m["phases"]["online"].get("window") for r, m in res.meters.items()}
    client = win["client"]
    assert client is not None
    servers = [r for r in ("p0", "p1", "p2") if win[r] is not None]
    assert len(servers) >= 2
    for r in servers:
        assert win[r][0] <= client[0], (r, win[r][0] - client[0])
    readies = [k for r in servers for k in res.meters[r]["by_tag"] if k.endswith("/ready") and "|sent|" in k]
    assert readies and all(k.startswith("offline|") for k in readies), readies
