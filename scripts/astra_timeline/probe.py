"""Test-side probe (issue #23, branch aw): a protocol module (``run_local(...,
protocol_module="probe")``) that registers astra unchanged and records, in every party, a
timeline on CLOCK_MONOTONIC (``time.perf_counter``) with the thread's CPU clock and the
kernel's run-queue delay (/proc/thread-self/schedstat): phase entries and exits, marks,
every Endpoint send / recv (begin, end), the socket write inside a small send, the return
of every select() wait and every socket read in the receive. Nothing in protocol code."""
import contextlib, json, os, select as _select, time
from secinfer.protocols.astra.protocol import SPEC  # noqa: F401  (the protocol itself, unchanged)
from secinfer.net import tcp_transport as _tt, tcp_fast as _tf, channel as _ch

_E = _tt.TcpEndpoint
_pc, _thr = time.perf_counter_ns, time.thread_time_ns
REC = []
_fd = [None]


def _rq():
    """(on-CPU ns, run-queue wait ns) of this thread so far."""
    if _fd[0] is None:
        _fd[0] = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    a = os.pread(_fd[0], 100, 0).split()
    return int(a[0]), int(a[1])


def ev(name, *info):
    on, wait = _rq()
    REC.append((_pc(), name, info, _thr(), wait))


_send, _recv, _close, _phase, _mark = _E.send, _E.recv, _E.close, _ch.Endpoint.phase, _ch.Endpoint.mark


class _SockProxy:
    def __init__(self, s):
        self._s = s

    def send(self, *a):
        REC.append((_pc(), "sock.send>", (), _thr(), 0))
        r = self._s.send(*a)
        REC.append((_pc(), "sock.send<", (r,), _thr(), 0))
        return r

    def recv_into(self, *a):
        r = self._s.recv_into(*a)
        REC.append((_pc(), "sock.read", (r,), _thr(), 0))
        return r

    def __getattr__(self, k):
        return getattr(self._s, k)


class _Sel:
    def select(self, *a):
        r = _select.select(*a)
        REC.append((_pc(), "woke", (len(r[0]),), _thr(), 0))
        return r


_tf.select = _Sel()


def _proxy(self):
    if getattr(self, "_probe_wrapped", False):
        return
    self._probe_wrapped = True
    for link in getattr(self, "_fast_out", {}).values():
        if link is not None and not isinstance(link.sock, _SockProxy):
            link.sock = _SockProxy(link.sock)
    for c in getattr(self, "_in", {}).values():
        if not isinstance(c.sock, _SockProxy):
            c.sock = _SockProxy(c.sock)


def send(self, peer, tag, *arrays):
    _proxy(self)
    ev("send>", peer, tag, self._phase)
    r = _send(self, peer, tag, *arrays)
    ev("send<", peer, tag)
    return r


_send_many = getattr(_E, "send_many", None)


def send_many(self, peers, tag, *arrays):
    """(recorded as one send> ... send< per peer, the first send> before any work and each
    send< at the end: the frames of ``send_many`` are made together, then written)"""
    _proxy(self)
    for p in peers:
        ev("send>", p, tag, self._phase)
    r = _send_many(self, peers, tag, *arrays)
    for p in peers:
        ev("send<", p, tag)
    return r


def recv(self, peer, tag, *specs, timeout=None):
    _proxy(self)
    ev("recv>", peer, tag, self._phase)
    r = _recv(self, peer, tag, *specs, timeout=timeout)
    ev("recv<", peer, tag)
    return r


@contextlib.contextmanager
def phase(self, name):
    ev("phase>", name)
    with _phase(self, name) as x:
        yield x
    ev("phase<", name)


def mark(self, name):
    ev("mark", name)
    return _mark(self, name)


def close(self, *a, **k):
    out = os.environ.get("AW_PROBE_OUT")
    if out and REC:
        with open(os.path.join(out, f"{self.me}-{os.getpid()}.json"), "w") as f:
            json.dump({"me": self.me, "rec": REC}, f)
    return _close(self, *a, **k)


_E.send, _E.recv, _E.close, _E.phase, _E.mark = send, recv, close, phase, mark
if _send_many is not None:
    _E.send_many = send_many


# ---- scheduling experiments (AW_SCHED, in every party process at import) ------------------
def _sched_setattr_slice(ns):
    import ctypes
    class A(ctypes.Structure):
        _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                    ("nice", ctypes.c_int32), ("prio", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                    ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]
    a = A(ctypes.sizeof(A), 0, 0, os.getpriority(os.PRIO_PROCESS, 0), 0, ns, 0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.syscall(314, 0, ctypes.byref(a), 0)
    if r != 0:
        raise OSError(ctypes.get_errno(), "sched_setattr")


def _apply_sched(role):
    mode = os.environ.get("AW_SCHED", "")
    if not mode:
        return
    if mode == "batch-all" or (mode == "batch-servers" and role in ("p0", "p1", "p2")):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    elif mode.startswith("slice"):
        _sched_setattr_slice(int(mode[5:] or 100_000))
    elif mode == "pin":
        os.sched_setaffinity(0, {1} if role == "p1" else {0})


_orig_phase = phase


@contextlib.contextmanager
def phase(self, name):   # noqa: F811
    if name == "setup" and not getattr(self, "_aw_sched", False):
        self._aw_sched = True
        _apply_sched(self.me)
    with _orig_phase(self, name) as x:
        yield x


_E.phase = phase
