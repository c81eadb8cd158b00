"""Thread CPU of TcpEndpoint.recv for frames already in the inbox (issue #23 item 2):
python scripts/busy_poll/queued_recv.py NATIVE(0|1) [N] [ELEMS]; prints us per receive."""
import sys, tempfile, time
from pathlib import Path
import numpy as np
from secinfer.net.channel import ArraySpec
from secinfer.net.tcp_transport import TcpEndpoint
from secinfer.runtime.cluster import load_cluster, write_loopback_cluster
import threading

native = sys.argv[1] == "1"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
elems = int(sys.argv[3]) if len(sys.argv) > 3 else 784
c = load_cluster(write_loopback_cluster(Path(tempfile.mkdtemp()) / "c", ("a", "b"), transport="tcp"))
eps = {}
def mk(p):
    eps[p] = TcpEndpoint.from_cluster(c, p, c.load_secret(p), c.session_id("q"), native=native,
                                      heartbeat_interval=30.0, peer_timeout=120.0, max_inbox=1 << 30)
ts = [threading.Thread(target=mk, args=(p,)) for p in "ab"]
[t.start() for t in ts]; [t.join() for t in ts]
a, b = eps["a"], eps["b"]
spec = ArraySpec(np.uint64, (None,))
x = np.arange(elems, dtype=np.uint64)
res = []
with a.phase("online"), b.phase("online"):
    a.send("b", "t", x); b.recv("a", "t", spec)
    for rnd in range(5):
        for _ in range(n):
            a.send("b", "t", x)
        deadline = time.monotonic() + 20
        while len(b._inbox["a"]) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(b._inbox["a"]) == n, len(b._inbox["a"])
        c0 = time.thread_time()
        for _ in range(n):
            b.recv("a", "t", spec)
        res.append((time.thread_time() - c0) / n * 1e6)
a.close(flush=False); b.close(flush=False)
print(f"native={native} elems={elems} recv of a queued frame: us per call (thread CPU), 5 rounds: "
      + " ".join(f"{r:.2f}" for r in res) + f"  median {sorted(res)[2]:.2f}")
