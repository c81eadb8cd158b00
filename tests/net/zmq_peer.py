"""A peer process for the transport tests: python zmq_peer.py CLUSTER ID NONCE MODE [N]
(the cluster file's ``transport`` picks ZeroMQ or direct TCP).

MODE echo: answer N "ping" messages from every other party with "pong" = ping + 1.
MODE idle: connect, print "ready", then wait to be killed.
"""

import sys
import time

import numpy as np

from secinfer.net.channel import ArraySpec
from secinfer.runtime.cluster import load_cluster
from secinfer.runtime.party import endpoint_class


def main() -> int:
    cluster_path, pid, nonce, mode = sys.argv[1:5]
    c = load_cluster(cluster_path)
    ep = endpoint_class(c.transport).from_cluster(c, pid, c.load_secret(pid), c.session_id(nonce),
                                                  recv_timeout=30)
    print("ready", flush=True)
    if mode == "idle":
        time.sleep(3600)
    n = int(sys.argv[5])
    for _ in range(n):
        for p in ep.peers:
            (x,) = ep.recv(p, "ping", ArraySpec(np.float64, (None,)))
            ep.send(p, "pong", x + 1)
    ep.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
