"""Per-hop cost of the transport alone: one small authenticated frame between two party
processes (one-way latency = half a ping-pong round trip) and bulk throughput per link.

``secinfer bench runtime`` runs it on both transports. The echo side is this module run as
a process: ``python -m secinfer.bench.hop CLUSTER ROLE NONCE MODE COUNT [BURSTS]`` (MODE
ping: answer COUNT pings; MODE bulk: BURSTS times, receive COUNT frames, then acknowledge
once). Bulk is timed per burst (median and spread over the bursts). On tcp the row says
which record layer ran (``record_layer``: native unless the library is missing or
``SECINFER_TCP_NATIVE=0``) and the busy-poll budget (``spin_us``, ``spin_yield``:
``SECINFER_TCP_SPIN_US`` / ``SECINFER_TCP_SPIN_YIELD``). Both processes run their loops in
the online phase, as a protocol's online hops.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from secinfer.net.channel import ArraySpec

_SMALL = ArraySpec(np.uint8, (None,))
_BULK = ArraySpec(np.uint8, (None,), max_elems=1 << 30)


def _serve(cluster_path: str, pid: str, nonce: str, mode: str, count: int, bursts: int = 1) -> int:
    from secinfer.runtime.cluster import load_cluster
    from secinfer.runtime.party import endpoint_class

    c = load_cluster(cluster_path)
    ep = endpoint_class(c.transport).from_cluster(c, pid, c.load_secret(pid), c.session_id(nonce),
                                                  recv_timeout=60)
    (peer,) = ep.peers
    cpu = 0.0
    with ep.phase("online"):   # (as a protocol's online hops: e.g. busy-polling applies there only)
        cpu = _echo(ep, peer, mode, count, bursts)
    ep.close()
    print(json.dumps({"cpu_s": cpu}), flush=True)
    return 0


def _echo(ep, peer: str, mode: str, count: int, bursts: int) -> float:
    cpu = 0.0
    if mode == "ping":
        c0 = time.process_time()
        for _ in range(count):
            (x,) = ep.recv(peer, "ping", _SMALL)
            ep.send(peer, "pong", x)
        cpu = time.process_time() - c0
    else:
        for _ in range(bursts):
            c0 = time.process_time()   # (the whole process: its transport threads count too)
            for _ in range(count):
                ep.recv(peer, "bulk", _BULK)
            cpu += time.process_time() - c0
            ep.send(peer, "ack", np.zeros(1, np.uint8))
    return cpu


def measure(transport: str, pings: int = 2000, bulk_mb: int = 16, bulk_frames: int = 32,
            payload: int = 8, bulk_bursts: int = 3) -> dict:
    """One-way latency (median and spread over ``pings`` round trips / 2) and bulk MB/s
    (median, min and max over ``bulk_bursts`` bursts of ``bulk_mb`` MB each). Next to them,
    what the code costs whatever the host's load: CPU microseconds of both processes per
    one-way hop (``one_way_cpu_us``), bulk MB per CPU-second of the sending and of the
    receiving process (``bulk_send_MB_per_cpu_s``, ``bulk_recv_MB_per_cpu_s``)."""
    from secinfer.runtime.cluster import load_cluster, write_loopback_cluster

    out = {"transport": transport}
    with tempfile.TemporaryDirectory(prefix="secinfer-hop-") as tmp:
        for mode, count in (("ping", pings), ("bulk", bulk_frames)):
            for attempt in range(3):
                # (a fresh cluster each try: on a crowded host another process may take
                # one of its free ports before the party binds it; then we try new ports)
                c = load_cluster(write_loopback_cluster(Path(tmp) / f"{mode}-{attempt}", ("a", "b"),
                                                        transport=transport, connect_timeout=20.0))
                try:
                    out.update(_phase(transport, c, mode, count, payload, bulk_mb, bulk_bursts))
                    break
                except _PortTaken:
                    if attempt == 2:
                        raise RuntimeError("hop: three clusters in a row had a port taken by another "
                                           "process") from None
    return out


class _PortTaken(Exception):
    pass


def _phase(transport: str, c, mode: str, count: int, payload: int, bulk_mb: int, bulk_bursts: int) -> dict:
    from secinfer.runtime.party import endpoint_class

    out: dict = {}
    nonce = f"hop-{mode}"
    proc = subprocess.Popen([sys.executable, "-m", "secinfer.bench.hop", str(c.path), "b", nonce,
                             mode, str(count), str(bulk_bursts)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ep = endpoint_class(transport).from_cluster(c, "a", c.load_secret("a"), c.session_id(nonce),
                                                    recv_timeout=60)
        if transport == "tcp":   # (the echo process chooses alike: same library, same environment)
            out["record_layer"] = "native" if ep.native else "python"
            out["spin_us"] = getattr(ep, "spin_us", 0.0)
            out["spin_yield"] = getattr(ep, "spin_yield", False)
        with ep.phase("online"):   # (as a protocol's online hops: busy-polling applies there only)
            if mode == "ping":
                msg = np.zeros(payload, np.uint8)
                rtts = []
                c0 = time.process_time()
                for _ in range(count):
                    t0 = time.perf_counter()
                    ep.send("b", "ping", msg)
                    ep.recv("b", "pong", _SMALL)
                    rtts.append(time.perf_counter() - t0)
                ping_cpu = time.process_time() - c0
                half = sorted(r / 2 for r in rtts[count // 10:])   # warm-up dropped
                out.update(one_way_us_median=statistics.median(half) * 1e6,
                           one_way_us_p10=half[len(half) // 10] * 1e6,
                           one_way_us_p90=half[(9 * len(half)) // 10] * 1e6, pings=count,
                           payload_bytes=payload)
            else:
                frame = np.zeros((bulk_mb << 20) // count, np.uint8)
                rates = []
                send_cpu = 0.0
                for _ in range(bulk_bursts):
                    t0, c0 = time.perf_counter(), time.process_time()
                    for _ in range(count):
                        ep.send("b", "bulk", frame)
                    send_cpu += time.process_time() - c0
                    ep.recv("b", "ack", _SMALL)
                    rates.append((frame.size * count) / (time.perf_counter() - t0) / 1e6)
                out.update(bulk_MB_s=statistics.median(rates), bulk_MB_s_min=min(rates),
                           bulk_MB_s_max=max(rates), bulk_MB=frame.size * count / 1e6,
                           bulk_frames=count, bulk_bursts=bulk_bursts)
        ep.close()
    except Exception as e:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if "cannot listen on" in str(e) or b"cannot listen on" in proc.stderr.read():
            raise _PortTaken() from e   # (and we then met whoever holds it: "does not know us")
        raise
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"hop echo process failed ({mode}, {transport}): "
                           f"{proc.stderr.read().decode(errors='replace')[-400:]}")
    echo_cpu = json.loads(proc.stdout.read().decode().strip().splitlines()[-1])["cpu_s"]
    if mode == "ping":   # CPU of both processes per one-way hop (send + receive sides)
        out["one_way_cpu_us"] = (ping_cpu + echo_cpu) / (2 * count) * 1e6
    else:
        recv_cpu = echo_cpu
        total = out["bulk_MB"] * bulk_bursts
        out.update(bulk_send_MB_per_cpu_s=total / max(send_cpu, 1e-9),
                   bulk_recv_MB_per_cpu_s=total / max(recv_cpu, 1e-9))
    return out


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
                    int(sys.argv[6]) if len(sys.argv) > 6 else 1))
