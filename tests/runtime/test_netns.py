"""Multi-host run: parties in separate network namespaces joined by a veth pair.

Needs root and ``ip netns``; skipped otherwise. Addresses 10.77.0.1/24 and 10.77.0.2/24
exist only inside the two namespaces this test creates; both are deleted afterwards
(deleting a namespace deletes its end of the veth pair and with it the pair).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]
HERE = Path(__file__).parent


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=20)


@pytest.fixture
def two_namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and the `ip` tool for network namespaces")
    tag = f"{os.getpid() % 100000}"
    ns = (f"sinf{tag}a", f"sinf{tag}b")
    veth = (f"sv{tag}a", f"sv{tag}b")
    created = []
    try:
        for n in ns:
            _ip("netns", "add", n)
            created.append(n)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for n, v, addr in zip(ns, veth, ("10.77.0.1/24", "10.77.0.2/24")):
            _ip("link", "set", v, "netns", n)
            _ip("-n", n, "addr", "add", addr, "dev", v)
            _ip("-n", n, "link", "set", v, "up")
            _ip("-n", n, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        for n in created:
            _ip("netns", "del", n, check=False)
        _ip("link", "del", veth[0], check=False)
        pytest.skip(f"cannot create network namespaces here: {getattr(e, 'stderr', e)}")
    try:
        yield ns, veth
    finally:
        for n in ns:
            _ip("netns", "del", n, check=False)
        _ip("link", "del", veth[0], check=False)  # gone with its namespace; harmless otherwise


def _rx_bytes(ns: str, dev: str) -> int:
    out = _ip("-n", ns, "-j", "-s", "link", "show", dev).stdout
    return int(json.loads(out)[0]["stats64"]["rx"]["bytes"])


def test_parties_in_separate_namespaces(two_namespaces, tmp_path):
    from secinfer.crypto.identity import keygen

    (ns_a, ns_b), (veth_a, _veth_b) = two_namespaces
    keygen(tmp_path / "keys", ["srv", "cli", "hlp"])
    placement = {"srv": ("server", "10.77.0.1", 5701, ns_a), "cli": ("client", "10.77.0.2", 5702, ns_b),
                 "hlp": ("helper", "10.77.0.2", 5703, ns_b)}
    text = 'session = "netns"\nconnect_timeout = 20.0\n'
    for pid, (role, host, port, _n) in placement.items():
        text += (f'\n[[party]]\nid = "{pid}"\nrole = "{role}"\nhost = "{host}"\nport = {port}\n'
                 f'public_key_file = "keys/{pid}.key"\n')
    (tmp_path / "cluster.toml").write_text(text)
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, PYTHONPATH=str(HERE))
    rx_before = _rx_bytes(ns_a, veth_a)
    procs = {}
    try:
        for pid, (_role, _h, _p, n) in placement.items():
            cmd = ["ip", "netns", "exec", n, sys.executable, "-m", "secinfer.runtime.party",
                   "--cluster", str(tmp_path / "cluster.toml"), "--id", pid, "--protocol", "test-ring",
                   "--protocol-module", "rt_ring_protocol", "--session", "f00d", "--option", "rounds=3",
                   "--network", "lat=2", "--result", str(tmp_path / f"{pid}.json")]
            if pid == "cli":
                cmd += ["--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]
            procs[pid] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        outs = {pid: p.communicate(timeout=90)[0].decode() for pid, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    assert all(p.returncode == 0 for p in procs.values()), outs
    y = np.load(tmp_path / "y.npy")
    assert np.array_equal(y, ((x * 2 + 1) * 2 + 1) * 2 + 1)
    recs = {pid: json.loads((tmp_path / f"{pid}.json").read_text()) for pid in placement}
    assert recs["srv"]["meter"]["phases"]["online"]["recv_payload"] == 3 * x.nbytes
    # the server's traffic really crossed the veth pair (CURVE adds overhead: at least the payload)
    assert _rx_bytes(ns_a, veth_a) - rx_before >= recs["srv"]["transport"]["bytes_recv"]
