"""`secinfer party` checks the query against the model owner's range certificate before
anything is shared (issue #22 item 3; secinfer.runtime.range_check): each party its own
`secinfer party` process on loopback, as on separate hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

from secinfer.arith.fixed import get_config
from secinfer.ir import bundled
from secinfer.ir.onnx_import import load_model
from secinfer.protocols import registry
from secinfer.runtime.cluster import write_loopback_cluster
from model_helpers import gemm_model

LINREG = "diabetes-linreg"


def _parties(tmp_path, protocol: str, model: str, x, client_args=(), timeout: float = 120.0) -> dict:
    """Start every role's `secinfer party`; {role: {"rc", "stderr", "rec", "t_exit"}}."""
    spec = registry.get(protocol)
    cluster = write_loopback_cluster(tmp_path / "cluster", spec.roles, session=f"range-{protocol}")
    np.save(tmp_path / "x.npy", np.asarray(x, dtype=np.float64))
    procs = {}
    for role in spec.roles:
        cmd = [sys.executable, "-m", "secinfer", "party", "--cluster", str(cluster), "--id", role,
               "--protocol", protocol, "--session", "c0ffee", "--result", str(tmp_path / f"{role}.json")]
        if role == spec.model_role:
            cmd += ["--model", model]
        if role == spec.input_role:
            cmd += ["--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"), *client_args]
        procs[role] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out, t_end = {}, time.monotonic() + timeout
    try:
        while len(out) < len(procs):
            for role, p in procs.items():
                if role not in out and p.poll() is not None:
                    out[role] = {"rc": p.returncode, "t_exit": time.monotonic(), "stderr": p.stderr.read()}
            if time.monotonic() > t_end:
                raise AssertionError(f"parties still running after {timeout}s: {set(procs) - set(out)}")
            time.sleep(0.05)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()
    for role, o in out.items():
        f = tmp_path / f"{role}.json"
        o["rec"] = json.loads(f.read_text()) if f.exists() else None
    return out


def _astra_reference(model_path, x):
    """ASTRA's bit-exact oracle (its client truncates from f_x + f_w bits exactly)."""
    from secinfer.protocols.rep3.linear import oracle, resolve_wfrac, to_linear

    cfg = get_config(registry.get("astra").default_fixed)
    return oracle(resolve_wfrac(to_linear(load_model(str(model_path))), cfg), x, cfg)


def _linreg_queries():
    x = bundled.bundled_testset(LINREG)[0][:2].astype(np.float64)
    bad = x.copy()
    bad[1, 0] = 1000.0     # the example (astra wraps at f_x + f_w bits: 6132.72 vs -43020.14)
    return x, bad


def test_in_range_astra_party_equals_the_reference(tmp_path):
    x, _ = _linreg_queries()
    model = bundled.bundled_path(LINREG)
    res = _parties(tmp_path, "astra", f"bundled:{LINREG}", x)
    for role, o in res.items():
        assert o["rc"] == 0, (role, o["stderr"])
        assert o["rec"]["range_check"] == ("certified" if role == "client" else "run"), role
    ring = np.load(tmp_path / "y.ring.npy")
    assert np.array_equal(ring.astype(np.int64), _astra_reference(model, x))
    tags = res["client"]["rec"]["meter"]["by_tag"]     # the runtime's exchange is not the protocol's cost
    assert tags and not any("__range" in k for k in tags)


def test_out_of_range_query_is_refused_by_the_client_and_every_party_ends(tmp_path):
    _, bad = _linreg_queries()
    res = _parties(tmp_path, "astra", f"bundled:{LINREG}", bad, timeout=60)
    cli = res["client"]
    assert cli["rc"] == 2, cli["stderr"]
    assert cli["rec"]["error"]["type"] == "FixedPointRangeError"
    msg = cli["rec"]["error"]["message"]
    assert "sample 1, feature 0 = 1000" in msg and "range certificate" in msg and "before anything was shared" in msg
    assert not (tmp_path / "y.npy").exists()
    for role in ("p0", "p1", "p2", "model_owner"):
        o = res[role]
        assert o["rc"] == 2, (role, o["stderr"])
        err = o["rec"]["error"]
        assert err["type"] == "QueryRefusedError", (role, err)
        assert "refused its query as outside the model owner's range certificate" in err["message"]
        assert "1000" not in err["message"]             # no value of the query leaves the client
        assert o["t_exit"] - cli["t_exit"] < 10, role    # promptly, not after a peer timeout
        assert o["rec"]["meter"]["phases"]["online"]["sent_payload"] == 0


def test_override_warns_and_runs(tmp_path):
    _, bad = _linreg_queries()
    res = _parties(tmp_path, "astra", f"bundled:{LINREG}", bad, client_args=["--allow-out-of-range"])
    for role, o in res.items():
        assert o["rc"] == 0, (role, o["stderr"])
        assert o["rec"]["range_check"] == ("overridden" if role == "client" else "run"), role   # peers can't tell
    assert "RangeWarning" in res["client"]["stderr"] and "may be WRONG" in res["client"]["stderr"]
    assert np.load(tmp_path / "y.npy").shape == (2, 1)


def test_crisp_bias_band_is_refused_in_party_mode(tmp_path):
    """crisp truncates acc + b 2^f (ProtocolSpec.bias_in_sum): a query whose acc fits but
    acc + b does not is refused by the client, and the server and dealer end at once (the
    malicious client check would otherwise abort blaming the honest client)."""
    cfg = get_config(registry.get("crisp").default_fixed)
    model = gemm_model(tmp_path / "bias.onnx", 1.0, float(cfg.product_max_abs))   # acc = 1, acc + b: out
    res = _parties(tmp_path, "crisp", model, np.array([[1.0]]), timeout=60)
    assert res["client"]["rc"] == 2 and res["client"]["rec"]["error"]["type"] == "FixedPointRangeError"
    for role in ("server", "dealer"):
        assert res[role]["rc"] == 2 and res[role]["rec"]["error"]["type"] == "QueryRefusedError", res[role]


def test_local_launcher_parties_skip_the_exchange():
    """`secinfer run` checked model and query exactly (check_run): its parties get --range-checked."""
    from pathlib import Path

    from secinfer.runtime.launcher import _party_cmd

    spec = registry.get("astra")
    cmd = _party_cmd("client", spec, Path("c.toml"), Path("/tmp"), "astra", "semi-honest", None, "x.npy", "none",
                     None, {}, "ab", None)
    assert "--range-checked" in cmd


def test_stamp_query_outside_the_certificate_runs_with_the_range_guard(tmp_path):
    """digits' pixels lie outside stamp's certificate at fx32f13 but inside its guarded regions:
    every party switches option range_guard on for this session; the answer is the reference's."""
    from secinfer.ir.fixed_exec import run_fixed

    x = bundled.bundled_testset("digits-mlp")[0][:1].astype(np.float64)
    res = _parties(tmp_path, "stamp", "bundled:digits-mlp", x)
    for role, o in res.items():
        assert o["rc"] == 0, (role, o["stderr"])
        assert o["rec"]["range_check"] == "guarded", role
    cfg = get_config(registry.get("stamp").default_fixed)
    ref = cfg.decode(run_fixed(load_model(str(bundled.bundled_path("digits-mlp"))), x, cfg))
    assert np.array_equal(np.load(tmp_path / "y.npy"), ref)


# ---- the exchange itself, in-process (fast): malformed messages are typed errors ----------
def _exchange(owner_cert, x, client_sends=None, allow=False):
    from secinfer.net.channel import run_local
    from secinfer.runtime.range_check import VERDICT_TAG, _send_json, party_exchange

    spec = registry.get("astra")
    ids = {r: r for r in spec.roles}

    def fn(role):
        def f(ep):
            if role == spec.input_role and client_sends is not None:   # a deviating client
                ep.recv(ids[spec.model_role], "__range_cert__", __import__("secinfer.spec", fromlist=["ArraySpec"])
                        .ArraySpec(np.uint8, (None,), max_elems=1 << 22))
                for p in ep.peers:
                    _send_json(ep, p, VERDICT_TAG, client_sends)
                return None
            return party_exchange(ep, spec, role, ids, x=x, cert=owner_cert, allow_out_of_range=allow)
        return f
    return run_local({r: fn(r) for r in spec.roles}, timeout=30)


def _cert():
    from secinfer.runtime.range_check import owner_certificate

    spec = registry.get("astra")
    g = load_model(str(bundled.bundled_path(LINREG)))
    return owner_certificate(spec, g, get_config(spec.default_fixed), {})


def test_exchange_verdicts_in_process():
    from secinfer.errors import ConfigError, FixedPointRangeError, QueryRefusedError

    x, bad = _linreg_queries()
    assert _exchange(_cert(), x) == {"p0": "run", "p1": "run", "p2": "run", "model_owner": "run",
                                     "client": "certified"}
    res = _exchange(_cert(), bad)
    assert isinstance(res["client"], FixedPointRangeError) and not isinstance(res["client"], QueryRefusedError)
    assert all(isinstance(res[r], QueryRefusedError) for r in ("p0", "p1", "p2", "model_owner"))
    nan = x.copy()
    nan[0, 3] = np.nan
    res = _exchange(_cert(), nan, allow=True)           # NaN: refused even with the override
    assert isinstance(res["client"], FixedPointRangeError) and isinstance(res["p0"], QueryRefusedError)
    res = _exchange(_cert(), x, client_sends={"verdict": "certified; rm -rf"})
    assert isinstance(res["model_owner"], ConfigError) and "unknown range verdict" in str(res["model_owner"])
    res = _exchange(_cert(), x, client_sends={"verdict": "guarded"})    # astra has no range guard
    assert "range guard" in str(res["p1"])
    res = _exchange({"version": 1, "features": 10, "box": [1.0]}, x)   # a malformed certificate
    assert isinstance(res["client"], ConfigError) and "malformed" in str(res["client"])
