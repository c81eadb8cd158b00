"""Issue #23 stall probe (a diagnostic; driven by run.py): party a sends K small frames back to back to each peer,
then waits for one reply from each; peers receive K frames, busy-compute W ms, reply.
Usage: pp.py CLUSTER ROLE K ROUNDS WORK_MS NATIVE"""
import json, resource, socket, struct, sys, time
RT = resource.RUSAGE_THREAD
import numpy as np
from secinfer.runtime.cluster import load_cluster
from secinfer.net.tcp_transport import TcpEndpoint
from secinfer.net.channel import ArraySpec

path, me, K, R, W, nat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6] == "1"
import os
if os.environ.get("NAGLE") == "1":   # contrast only: what a socket without TCP_NODELAY looks like
    from secinfer.net import tcp_handshake as _th
    _ka = _th.keepalive
    def _nagle(sock, t):
        _ka(sock, t); sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    _th.keepalive = _nagle
c = load_cluster(path)
ep = TcpEndpoint.from_cluster(c, me, c.load_secret(me), c.session_id("pp"), native=nat)
SPEC = ArraySpec(np.uint64, (None,))
peers = [p for p in c.parties if p != me]
x = np.arange(40, dtype=np.uint64)
pc = time.perf_counter

def tcpinfo(s):
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    # struct tcp_info: 8 u8, then u32s: rto ato snd_mss rcv_mss unacked sacked lost retrans fackets
    # last_data_sent last_ack_sent last_data_recv last_ack_recv pmtu rcv_ssthresh rtt rttvar snd_ssthresh snd_cwnd
    u = struct.unpack("8B" + "24I", b[:104])
    return dict(ato=u[9], unacked=u[12], rtt=u[23], cwnd=u[26])

out = {"role": me, "native": ep.native}
if me == "a":
    sends, rounds, infos, slow = [], [], [], []
    for r in range(R):
        t0 = pc()
        for p in peers:
            for i in range(K):
                u0 = resource.getrusage(RT); s = pc(); x[0] = time.monotonic_ns(); ep.send(p, f"m{r}.{i}", x); d = pc() - s; u1 = resource.getrusage(RT); sends.append(d)
                if d > 0.005: slow.append((round(d*1e3,2), u1.ru_nvcsw-u0.ru_nvcsw, u1.ru_nivcsw-u0.ru_nivcsw, round((u1.ru_utime+u1.ru_stime-u0.ru_utime-u0.ru_stime)*1e3,2), i))
        for p in peers:
            ep.recv(p, f"r{r}", SPEC, timeout=30)
        rounds.append(pc() - t0)
        if r % 50 == 0:
            infos.append(tcpinfo(ep._out[peers[0]].sock))
    # one-frame baseline: one send per round
    base = []
    for r in range(R):
        for p in peers:
            s = pc(); ep.send(p, f"b{r}", x); base.append(pc() - s)
        for p in peers:
            ep.recv(p, f"q{r}", SPEC, timeout=30)
    nd = {p: (ep._out[p].sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
              ep._in[p].sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)) for p in peers}
    out.update(slow=slow, sends=sends, rounds=rounds, base=base, nodelay=nd, infos=infos)
else:
    lat, rslow = [], []
    for r in range(R):
        for i in range(K):
            u0 = resource.getrusage(RT); t0 = time.monotonic_ns()
            (y,) = ep.recv("a", f"m{r}.{i}", SPEC, timeout=30)
            t1 = time.monotonic_ns(); u1 = resource.getrusage(RT)
            l = (t1 - int(y[0])) / 1e6; lat.append(l)
            if l > 20: rslow.append((round(l, 2), round((t1 - t0) / 1e6, 2), round((t0 - int(y[0])) / 1e6, 2), u1.ru_nvcsw - u0.ru_nvcsw, u1.ru_nivcsw - u0.ru_nivcsw, i))
        t = time.perf_counter() + W / 1000
        while time.perf_counter() < t:
            pass
        ep.send("a", f"r{r}", x)
    for r in range(R):
        ep.recv("a", f"b{r}", SPEC, timeout=30)
        ep.send("a", f"q{r}", x)
if me != 'a':
    out['lat'] = lat; out['rslow'] = rslow
ep.close()
print(json.dumps(out))
