"""Helpers for the serving tests: a loopback cluster, `secinfer serve` processes, cleanup
(imported by conftest.py and the tests; a unique module name, not ``conftest``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from secinfer.protocols import registry
from secinfer.runtime.cluster import write_loopback_cluster
from secinfer.runtime.serve import server_status

SRC = str(Path(__file__).resolve().parents[2] / "src")


def serve_cmd(cluster, pid, protocol, model=None, *extra):
    cmd = [sys.executable, "-m", "secinfer.cli.main", "serve", "--cluster", str(cluster), "--id", pid,
           "--protocol", protocol, *extra]
    if model:
        cmd += ["--model", model]
    return cmd


class Servers:
    """Every model-side role of ``protocol`` as its own `secinfer serve` process."""

    def __init__(self, tmp: Path, protocol: str, model: str, extra=(), **cluster_settings):
        spec = registry.get(protocol)
        # a peer silent for 10 s is dead: with 2 s, a client process descheduled on a loaded
        # 2-core machine (the whole suite beside it) was declared dead mid-query
        settings = dict(connect_timeout=8.0, heartbeat_interval=0.5, peer_timeout=10.0)
        settings.update(cluster_settings)
        self.cluster = write_loopback_cluster(tmp / "cluster", spec.roles, session="serve-test", **settings)
        self.spec = spec
        self.client = spec.input_role
        self.ids = [r for r in spec.roles if r != spec.input_role]
        env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.logs = {}
        self.procs = {}
        for pid in self.ids:
            log = open(tmp / f"serve-{pid}.log", "w+")
            self.logs[pid] = log
            m = model if pid == spec.model_role else None
            self.procs[pid] = subprocess.Popen(serve_cmd(self.cluster, pid, protocol, m, *extra), env=env,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_up(time.monotonic() + 60)
        except BaseException:
            self.terminate(timeout=5)     # a server that failed to start leaves none of the others running
            raise

    def _wait_up(self, deadline) -> None:
        for pid in self.ids:
            while True:
                if self.procs[pid].poll() is not None:
                    raise RuntimeError(f"serve {pid} exited: {self.log(pid)}")
                try:
                    server_status(self.cluster, pid, self.client, timeout=0.5)
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    def log(self, pid) -> str:
        f = self.logs[pid]
        f.flush()
        f.seek(0)
        return f.read()

    def status(self, pid) -> dict:
        return server_status(self.cluster, pid, self.client)

    def wait_settled(self, timeout=30.0) -> dict:
        """Status of every server once none has a session running or pending."""
        deadline = time.monotonic() + timeout
        while True:
            st = {pid: self.status(pid) for pid in self.ids}
            if all(s["running"] == 0 and s["pending"] == 0 for s in st.values()) or time.monotonic() > deadline:
                return st
            time.sleep(0.2)

    def wait_prep(self, n, timeout=60.0) -> dict:
        """Status of every server once each holds at least ``n`` prepared items."""
        deadline = time.monotonic() + timeout
        while True:
            st = {pid: self.status(pid) for pid in self.ids}
            if all(v["prep"]["available"] >= n for v in st.values()):
                return st
            if time.monotonic() > deadline:
                raise AssertionError(f"the prepared pool did not fill to {n}: "
                                     f"{ {k: v['prep'] for k, v in st.items()} }")
            time.sleep(0.2)

    def terminate(self, timeout=30.0) -> dict:
        codes = {}
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for pid, p in self.procs.items():
            try:
                codes[pid] = p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                codes[pid] = p.wait()
        for f in self.logs.values():
            f.close()
        return codes
