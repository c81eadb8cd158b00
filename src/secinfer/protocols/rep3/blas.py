"""One BLAS thread for a three-party session.

The parties' products are small (a batch x 784 by 784 x 128 layer at most, as 16-bit limbs
over float64 BLAS: ``secinfer.arith.ring.ring_matmul``), and on the machines this runs on
three parties (and, for STAMP, their devices) share two cores with the transport's
threads. OpenBLAS's own thread pool then spins against them: measured under load on the
2-core machine, a 1000 x 784 by 784 x 10 float product took 43 ms with the default pool
and 1.8 ms with one thread (issue #23 item 4). ``one_blas_thread`` limits BLAS to one
thread for the session and restores the previous limit when the last session of the
process (tests run several parties in one process) leaves. threadpoolctl ships with
scikit-learn (a dependency); without it BLAS keeps its default.
"""

from __future__ import annotations

import contextlib
import threading

try:   # imported with the protocol (the launcher's fork server preloads it): 2 ms per session, not 25
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - a scikit-learn dependency
    threadpool_limits = None

_lock = threading.Lock()
_state: list = [0, None, None]   # sessions inside, the limiter that restores the previous limit, a controller


def keep_controller() -> None:
    """Find the loaded BLAS libraries now, once, for every later session of this process
    and of its forks (threadpoolctl walks every shared object with a realpath each: ~4-5 ms
    of CPU per call). For a process whose BLAS is loaded already and which loads no other
    (the launcher's fork server calls it before it forks the parties,
    ``secinfer.runtime.launcher_fork.preload``); elsewhere each session looks afresh."""
    if threadpool_limits is not None:
        from threadpoolctl import ThreadpoolController

        with _lock:
            _state[2] = ThreadpoolController()


@contextlib.contextmanager
def one_blas_thread():
    with _lock:
        if _state[0] == 0 and threadpool_limits is not None:
            _state[1] = threadpool_limits(limits=1, user_api="blas") if _state[2] is None else \
                _state[2].limit(limits=1, user_api="blas")
        _state[0] += 1
    try:
        yield
    finally:
        with _lock:
            _state[0] -= 1
            if _state[0] == 0 and _state[1] is not None:
                _state[1].restore_original_limits()
                _state[1] = None
