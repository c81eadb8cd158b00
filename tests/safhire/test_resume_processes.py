"""A client process killed mid-inference and restarted resumes at the round it reached
[SAFHIRE Sec. 4.6]: two OS processes over the authenticated TCP transport."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np

from secinfer.ir import bundled
from secinfer.protocols.safhire.session import load_checkpoint
from secinfer.runtime.cluster import write_loopback_cluster
from tests.safhire.helpers import options
from tests.safhire.test_protocol import _oracle
from tests.safhire.qhelpers import digits


def _party(role, cluster, work, opts, model, inp, tag):
    cmd = [sys.executable, "-m", "secinfer.runtime.party", "--cluster", str(cluster), "--id", role,
           "--protocol", "safhire", "--session", f"resume-{tag}", "--options-json", json.dumps(opts),
           "--result", str(work / f"result-{role}-{tag}.json"), "--recv-timeout", "60"]
    cmd += ["--model", model] if role == "server" else ["--input", str(inp), "--output", str(work / "out.npy")]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(work / f"{role}-{tag}.log", "wb"))


def test_killed_client_resumes_at_its_round(tmp_path):
    g, x, _ = digits("digits-mlp")
    xs = x[100:112]                                   # 12 samples x 2 rounds = 24 rounds
    inp = tmp_path / "x.npy"
    np.save(inp, xs)
    model = str(bundled.bundled_path("digits-mlp"))
    ck = tmp_path / "client.ckpt.npz"
    base = options(b=12)
    sopts = dict(base, sessions=str(tmp_path / "sessions"))
    copts = dict(base, checkpoint=str(ck))
    cluster = write_loopback_cluster(tmp_path / "cluster", ["server", "client"], session="resume")

    srv = _party("server", cluster, tmp_path, sopts, model, inp, "a")
    cli = _party("client", cluster, tmp_path, copts, model, inp, "a")
    reached = 0
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and cli.poll() is None:
            st = load_checkpoint(str(ck)) if ck.exists() else None
            if st is not None and st["next_t"] >= 4:
                cli.send_signal(signal.SIGKILL)
                reached = st["next_t"]
                break
            time.sleep(0.02)
        cli.wait(30)
        srv.wait(60)
    finally:
        for p in (cli, srv):
            if p.poll() is None:
                p.kill()
    assert reached >= 4, "client finished before it could be killed"
    rec = json.loads((tmp_path / "result-server-a.json").read_text())
    assert not rec["ok"]                               # its client vanished
    assert list((tmp_path / "sessions").glob("*.npz")), "server kept no session state"

    # restart: the client from its checkpoint; a server on the same session store
    srv = _party("server", cluster, tmp_path, sopts, model, inp, "b")
    cli = _party("client", cluster, tmp_path, copts, model, inp, "b")
    try:
        cli.wait(240)
        srv.wait(60)
    finally:
        for p in (cli, srv):
            if p.poll() is None:
                p.kill()
    rc = json.loads((tmp_path / "result-client-b.json").read_text())
    rs = json.loads((tmp_path / "result-server-b.json").read_text())
    assert rc["ok"] and rs["ok"], (rc["error"], rs["error"])
    assert rc["info"]["resumed_at"] >= reached - 1
    assert rs["info"]["resumed_at"] == rc["info"]["resumed_at"]
    qm = _oracle(g, base)
    out = np.load(tmp_path / "out.npy")
    assert out.shape == (12, 10)
    np.testing.assert_array_equal(out, qm.run(xs))
    assert not list((tmp_path / "sessions").glob("*.npz"))   # finished sessions are dropped
