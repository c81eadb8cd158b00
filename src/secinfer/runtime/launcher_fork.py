"""Fork server of the local launcher: the parties' modules are imported once, then every
party process is forked from that pre-imported process (issue #23, item 2).

Why. A party started as a fresh ``python -m secinfer.runtime.party`` first imports numpy,
cryptography, the transport and the protocol (0.35-0.6 s of CPU each); the five parties of
an ASTRA run did that at once on a 2-core machine, which was most of the 1.5 s a
``secinfer run`` of a one-query dot product took.

How.

* The launcher spawns one server process (``python -m secinfer.runtime.launcher_fork``)
  in its own session, with a parent-death signal (it never outlives the launcher). It is a
  fresh interpreter started before the launcher reads the model or the input: the server
  never holds any party's data, so a forked party holds only what its own role reads after
  the fork (the client never has the model's weights in its memory).
* The server imports what the parties of that protocol need (``preload``), checks that
  forking is safe (one thread of Python; the native Go library not loaded: a Go runtime
  does not survive a fork; no ZeroMQ context), and says ``ready``.
* For each role the launcher sends the party's command-line arguments; the server forks,
  and the child starts its own session (its own process group, as a spawned party had),
  writes stdout/stderr to the party's log, arms its parent-death signal (the party dies
  with the server, which dies with the launcher) and runs
  ``secinfer.runtime.party.party_main``; it ends with ``os._exit``, never returning into
  the server's loop.
* The server reaps its children and reports each exit status with ``subprocess.Popen``'s
  convention (negative: killed by that signal); ``ForkedParty`` gives the launcher the
  ``pid``/``poll``/``wait``/``returncode`` of a ``Popen``.
* Whatever goes wrong with the server (it cannot start, forking is unsafe, it dies before
  it is ready), the launcher starts each party as its own interpreter, as before
  (``secinfer.runtime.launcher``, ``start="spawn"``).

* ``secinfer run`` forks its server from the command process itself, before it parses its
  line or imports numpy (``serve_forked``), and the server forks a *run process* that runs
  the line in the command's stead (``run`` below, ``secinfer.cli.runner``) as soon as numpy,
  the launcher and the protocol are imported (``preload(between=...)``), without being
  asked (it has the command's line, environment, folder and, dup'ed, streams from the
  fork), and imports the rest meanwhile. The run process gets its own control socket to
  the server and asks it for its parties like a launcher. The command only waits: the
  server tells it ``started PID``, ``exited PID RC`` or ``error MESSAGE`` in plain lines
  (``secinfer.cli.runner.wait_run``), so that it imports nothing more (json, socket,
  subprocess: ~20-30 ms of CPU beside the server's imports). A launcher that spawned its
  server can ask it for a run process too (``ForkServer.start_run``).

Messages: one JSON object per line over a Unix socket pair. Launcher -> server:
``{"op": "fork", "role", "argv", "log"}``, ``{"op": "run", "target", "env", "cwd", ...}``
(with the launcher's stdin, stdout and stderr as SCM_RIGHTS descriptors), ``{"op":
"exit"}``. Server -> launcher: ``{"op": "ready", "pid", "at", "seconds", "failed",
"unsafe"}``, ``{"op": "started", "role", "pid"}``, ``{"op": "exited", "role", "pid",
"rc"}``, ``{"op": "error", "role", "message"}`` (role ``run``: the run process). A run
process's own socket carries ``fork``/``exit`` and the replies; its ``exit`` (or its end)
stops only its parties.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

from secinfer.runtime.fork_child import close_all, exit_child, run_child
from secinfer.runtime.launcher_prefork import Spares, preload, warm_party_parser

_MAX_LINE = 1 << 20


class ForkServerError(Exception):
    """The fork server could not start a party (the launcher then spawns it instead)."""


class _Lines:
    """Newline-separated JSON messages from a stream socket."""

    def __init__(self, sock: socket.socket, fds: bool = False):
        self.sock = sock
        self.buf = b""
        self.eof = False
        self.fds: list[int] | None = [] if fds else None   # file descriptors received (SCM_RIGHTS)
        self.plain = False   # the command line waiting for its run process (``serve_forked(run=...)``)
        self.run_process = False   # a run process's socket (``_fork_run``): it gets spares

    def read(self) -> list[dict]:
        """What is available now (the socket must be readable or non-blocking)."""
        try:
            if self.fds is None:
                data = self.sock.recv(65536)
            else:
                data, fds, _, _ = socket.recv_fds(self.sock, 65536, 8)
                self.fds.extend(fds)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return []
        self.buf += data
        if len(self.buf) > _MAX_LINE and b"\n" not in self.buf:
            self.eof = True
            return []
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def _send(sock: socket.socket, msg: dict) -> None:
    sock.sendall(json.dumps(msg).encode() + b"\n")


def _set_pdeathsig() -> None:
    """Linux: SIGKILL when the parent dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def one_blas_thread_env(env) -> dict:
    """The environment that starts OpenBLAS with one thread, unless ``env`` sets its
    thread count already: {} then. Read once, when numpy loads OpenBLAS. Every party runs
    with one BLAS thread anyway (``secinfer.protocols.rep3.blas`` and the protocols'
    ``threadpool_limits(1)``: several parties share the cores); started with a pool of
    threads, numpy's import costs ~0.05 s more (creating the pool) and each forked party
    pays to shrink it. A party that asks for more threads (``threadpool_limits``) still
    gets them."""
    if any(k in env for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS")):
        return {}
    return {"OPENBLAS_NUM_THREADS": "1"}


# ---- the launcher's side ------------------------------------------------------------------------
class ForkedParty:
    """A party forked by the server: the part of ``subprocess.Popen`` the launcher uses."""

    def __init__(self, server: "ForkServer", role: str, pid: int):
        self.server, self.role, self.pid = server, role, pid
        self.args = ["<forked party>", role]
        self.spare = False   # forked ahead of the request (``launcher_prefork``)

    @property
    def returncode(self) -> int | None:
        return self.server.exits.get(self.pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.server.pump(0.5 if left is None else min(0.5, left))
        return self.returncode


class ForkServer:
    """The launcher's handle on one fork server (one run: see ``start``)."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket, protocol: str,
                 protocol_module: str | None, transport: str | None, t_spawn: float):
        self.proc, self.sock = proc, sock
        self.protocol, self.protocol_module, self.transport = protocol, protocol_module, transport
        self.t_spawn = t_spawn                   # time.time() when it was spawned
        self.t_ready: float | None = None        # time.time() when it said ready
        self.info: dict | None = None            # its ready message
        self.parties: dict[int, ForkedParty] = {}
        self.exits: dict[int, int] = {}          # pid -> exit status (Popen's convention)
        self.closed = False
        self._pending: dict[str, dict] = {}      # role -> started/error reply
        self._lines = _Lines(sock)
        self.dead = False

    @classmethod
    def start(cls, protocol: str, *, protocol_module: str | None = None, transport: str | None = None,
              env: dict | None = None, onnx: bool = True) -> "ForkServer | None":
        """Spawn a server that preloads ``protocol``'s party modules; None if it cannot start.
        ``onnx``: also the ONNX importer (not needed when the launcher hands the model owner
        its checked model, ``launcher.write_model_ir``)."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        cmd = [sys.executable, "-m", "secinfer.runtime.launcher_fork", "--fd", str(child.fileno()),
               "--parent", str(os.getpid()), "--protocol", protocol]
        if protocol_module:
            cmd += ["--protocol-module", protocol_module]
        if transport:
            cmd += ["--transport", transport]
        if not onnx:
            cmd += ["--no-onnx"]
        if env is None and protocol_module:   # (its folder on the path, as the parties need it)
            from secinfer.runtime.launcher import _party_env

            env = _party_env(protocol_module)
        env = dict(os.environ if env is None else env)
        env["PYTHONUNBUFFERED"] = "1"   # (as a spawned party had: a killed party's last words reach its log)
        env.update(one_blas_thread_env(env))
        try:
            proc = subprocess.Popen(cmd, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        except OSError:
            parent.close()
            return None
        finally:
            child.close()
        return cls(proc, parent, protocol, protocol_module, transport, time.time())

    @classmethod
    def attach(cls, sock: socket.socket, msg: dict) -> "ForkServer":
        """In a run process (``start_run``): the handle on the server that forked it (ready
        already; ``close`` does not wait for it: it is this process's parent)."""
        server = cls(_Parent(), sock, msg["protocol"], None, msg.get("transport"), float(msg["spawned"]))
        if msg.get("ready"):        # (else its ready message comes over the socket)
            server.info, server.t_ready = msg["ready"], float(msg["ready_seen"])
        return server

    def start_run(self, target: str, payload: dict, timeout: float = 120.0) -> int | None:
        """Have the server fork a process that runs ``target`` (``module:function``, called
        with its control socket and the message) in this one's stead, with this process's
        stdin/stdout/stderr, environment and working folder; its pid, or None if it could
        not be started (nothing has run then). Only once the server is ready and safe."""
        if self.dead:
            return None
        msg = dict(payload, op="run", target=target, env=dict(os.environ), cwd=os.getcwd(),
                   protocol=self.protocol, transport=self.transport, spawned=self.t_spawn)
        self._pending.pop("run", None)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            socket.send_fds(self.sock, [json.dumps(msg).encode() + b"\n"], [0, 1, 2])
        except OSError:
            self._died()
            return None
        end = time.monotonic() + timeout     # (forked once the server has imported the protocol)
        while "run" not in self._pending and not self.dead and time.monotonic() < end:
            self.pump(0.5)
        reply = self._pending.pop("run", None)
        if reply is None or reply.get("op") != "started":
            return None
        return int(reply["pid"])

    def matches(self, protocol: str, protocol_module: str | None, transport: str | None) -> bool:
        return (self.protocol, self.protocol_module, self.transport) == (protocol, protocol_module, transport)

    def pump(self, wait: float) -> None:
        """Read the server's messages, waiting up to ``wait`` seconds for the first one."""
        if self.dead:
            return
        try:
            r = select.select([self.sock], [], [], max(0.0, wait))[0]
        except (OSError, ValueError):
            r = [self.sock]
        while r:
            for msg in self._lines.read():
                self._handle(msg)
            if self._lines.eof:
                self._died()
                return
            r = select.select([self.sock], [], [], 0)[0]

    def _handle(self, msg: dict) -> None:
        op = msg.get("op")
        if op == "ready":
            self.info, self.t_ready = msg, time.time()
        elif op in ("started", "error"):
            self._pending[msg["role"]] = msg
        elif op == "exited":
            self.exits[int(msg["pid"])] = int(msg["rc"])

    def _died(self) -> None:
        """The server is gone: its parties got SIGKILL from their parent-death signal."""
        self.dead = True
        for pid in self.parties:
            if pid not in self.exits:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.exits[pid] = -signal.SIGKILL

    def wait_ready(self, timeout: float) -> str | None:
        """None once the server is ready to fork; else why it cannot be used."""
        end = time.monotonic() + timeout
        while self.info is None and not self.dead and time.monotonic() < end:
            self.pump(min(0.5, max(0.0, end - time.monotonic())))
        if self.info is None:
            return "the fork server died while importing" if self.dead else \
                f"the fork server was not ready within {timeout:g}s"
        if self.info.get("unsafe"):
            return f"forking is unsafe here: {self.info['unsafe']}"
        return None

    def fork(self, jobs: list[tuple[str, list[str], str]], timeout: float = 10.0,
             env: dict | None = None) -> dict[str, ForkedParty]:
        """Start one party per ``(role, argv, log_path)`` (its stdout and stderr go to the
        log, created 0600); all requests go out at once. ``env``: entries added to each
        party's environment. Returns {role: ForkedParty}; raises
        ``ForkServerError`` naming the first role that could not be started (those started
        are in ``self.parties``: the caller stops them)."""
        if self.dead:
            raise ForkServerError("the fork server is gone")
        roles = [role for role, _, _ in jobs]
        for role in roles:
            self._pending.pop(role, None)
        try:
            self.sock.sendall(b"".join(json.dumps({"op": "fork", "role": role, "argv": list(argv), "log": str(log),
                                                   "env": dict(env or {})}).encode() + b"\n"
                                       for role, argv, log in jobs))
        except OSError as e:
            self._died()
            raise ForkServerError(f"the fork server is gone: {e}") from None
        end = time.monotonic() + timeout
        while any(r not in self._pending for r in roles) and not self.dead and time.monotonic() < end:
            self.pump(min(0.5, max(0.0, end - time.monotonic())))
        out, err = {}, None
        for role in roles:
            reply = self._pending.pop(role, None)
            if reply is not None and reply.get("op") == "started":
                out[role] = self.parties[int(reply["pid"])] = ForkedParty(self, role, int(reply["pid"]))
                out[role].spare = bool(reply.get("spare"))   # (forked ahead: ``launcher_prefork``)
            elif err is None:
                why = (reply or {}).get("message") or ("it is gone" if self.dead else "no answer")
                err = ForkServerError(f"the fork server could not start {role}: {why}")
        if err is not None:
            err.started = out
            raise err
        return out

    def close(self, timeout: float = 2.0) -> None:
        """Stop the server (its parties must be reaped already: ``_stop_all``) and reap it."""
        if self.closed:
            return
        self.closed = True
        if not self.dead:
            try:
                _send(self.sock, {"op": "exit"})
            except OSError:
                pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.dead = True
        if isinstance(self.proc, _Parent):            # (a run process: the server is its parent, and goes on)
            return
        if not self.parties and self.info is None:   # still importing, never used: no need to wait for it
            _kill_server(self.proc.pid)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_server(self.proc.pid)
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                pass



def _kill_server(pid: int) -> None:
    """SIGKILL the server's group (a forked server may not have made its group yet: then it)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


class _Parent:
    """``ForkServer.proc`` in a run process: the server is its parent (not reaped here)."""

    def __init__(self):
        self.pid = os.getppid()
        self.returncode = None

    def poll(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        return 0


def serve_forked(fd: int, parent: int, protocol: str, transport: str | None, onnx: bool,
                 run: dict | None = None) -> int:
    """A fork server made by forking the launcher (``ForkServer.start(forked=...)``), in
    the child: what ``main`` does in a spawned one. Only a process that holds no data of
    any party may fork itself into one (the command line before it read its arguments): the
    server, and every party forked from it, then holds none either.

    ``run`` (``secinfer run``, ``secinfer.cli.main``): the run process to fork as soon as
    the protocol is imported, without waiting to be asked: the command line's ``argv``,
    ``t_main``, ``process_start``, its environment (``env``) and working folder (``cwd``)
    as they were at the fork, and ``fds``, copies of its stdin, stdout and stderr. The
    command is then told about it in plain lines (``started PID``, ``exited PID RC``,
    ``error MESSAGE``: ``secinfer.cli.runner.wait_run``), so that it imports nothing more."""
    ctrl = socket.socket(fileno=fd)
    os.setsid()                                    # its own session, as a spawned server has
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.environ["PYTHONUNBUFFERED"] = "1"         # (what a spawned server's environment says)
    os.environ.update(one_blas_thread_env(os.environ))   # before numpy loads OpenBLAS
    _set_pdeathsig()
    if os.getppid() != parent:                    # the launcher died before we armed the signal
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the launcher stops us (and the parties) itself
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    if run is not None:
        run = dict(run, op="run", target="secinfer.cli.runner:run_forked", protocol=protocol, transport=transport,
                   spawned=float(run.get("spawned") or time.time()))   # (when the command forked us)
    return serve(ctrl, protocol, None, transport, onnx=onnx, run=run)


# ---- the server's side --------------------------------------------------------------------------
def fork_unsafe() -> str | None:
    """Why this process must not fork a party, or None."""
    import threading

    if threading.active_count() != 1:
        return f"{threading.active_count()} Python threads are running"
    native = sys.modules.get("secinfer.native.lib")
    if native is not None and getattr(native, "_lib", None) is not None:
        return "the native library (a Go runtime) is loaded"
    try:
        with open("/proc/self/maps") as f:
            if "libsecinferhe" in f.read():
                return "the native library (a Go runtime) is mapped"
    except OSError:
        pass
    zmq = sys.modules.get("zmq")
    if zmq is not None and getattr(getattr(zmq, "Context", None), "_instance", None) is not None:
        return "a ZeroMQ context exists"
    return None


def _child(req: dict, close_fds: list[int], parser=None) -> None:
    """In the forked child: become the party; never returns. ``parser``: the party's
    command-line parser, built once by the server (``party.party_parser``)."""
    code = 2
    try:
        os.setsid()                                # own session and process group, as a spawned party
        close_all(close_fds)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        _unbuffered_stdio()   # a killed party's last words reach its log
        os.environ.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
        from secinfer.runtime.party import party_main

        code = int(party_main(list(req["argv"]), parser) or 0)
    except SystemExit as e:                      # argparse: usage errors
        code = e.code if isinstance(e.code, int) else 2
    except BaseException:  # noqa: BLE001 - the log says what happened; the exit code says it failed
        import traceback

        try:
            traceback.print_exc()
        except Exception:  # noqa: BLE001
            pass
        code = 2
    finally:
        exit_child(code)


def _unbuffered_stdio() -> None:
    """sys.stdout and sys.stderr writing straight to fds 1 and 2 (as ``python -u``): a
    server forked from the command line has the command's streams (block-buffered when
    they were pipes)."""
    import io

    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        try:
            old.flush()
        except (OSError, ValueError, AttributeError):
            pass
        setattr(sys, name, io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                            encoding=getattr(old, "encoding", None) or "utf-8",
                                            errors=getattr(old, "errors", None) or "strict",
                                            line_buffering=False, write_through=True))


def serve(ctrl: socket.socket, protocol: str, protocol_module: str | None, transport: str | None,
          onnx: bool = True, run: dict | None = None) -> int:
    import gc

    t0 = time.perf_counter()
    conns = {ctrl.fileno(): _Lines(ctrl, fds=True)}   # the launcher's, then one per run process (``run``)
    if run is not None:     # (``serve_forked``: the command line's run process, unasked)
        conns[ctrl.fileno()].plain = True
        conns[ctrl.fileno()].fds.extend(run.pop("fds"))
    children: dict[int, tuple[str, int | None, int]] = {}   # pid -> (role, pidfd, fileno of the asking conn)
    early: list[dict] = []                        # messages read before ready, for the loop below
    ready: dict = {}

    def run_early():
        # a launcher that asked for a run process at once (``start_run``) gets it now: its
        # own imports then run beside the rest of ours
        if run is not None:
            _fork_run(run, conns[ctrl.fileno()], conns, children, None)
        elif select.select([ctrl], [], [], 0)[0]:
            msgs = conns[ctrl.fileno()].read()
            for m in msgs:
                if m.get("op") == "run":
                    _fork_run(m, conns[ctrl.fileno()], conns, children, None)
                else:
                    early.append(m)

    gc.disable()    # (imports make few cycles; collecting during them costs ~10% of their CPU)
    parser = None   # the parties' command-line parser, built once here
    try:
        failed = preload(protocol, protocol_module, transport, onnx, between=run_early)
        party = sys.modules.get("secinfer.runtime.party")
        if party is not None and hasattr(party, "party_parser"):
            try:
                parser = party.party_parser()
            except Exception:  # noqa: BLE001 - each party then builds its own
                parser = None
            if parser is not None:
                warm_party_parser(parser)
    finally:
        gc.freeze()     # the children's collector then leaves the preloaded objects (and their pages) alone
        gc.enable()     # (the parties inherit an enabled collector)
    unsafe = fork_unsafe()
    ready.update(op="ready", pid=os.getpid(), at=time.time(), seconds=round(time.perf_counter() - t0, 6),
                 cpu_seconds=round(time.process_time(), 6),   # (interpreter start and imports)
                 failed=failed, unsafe=unsafe)
    for conn in conns.values():                    # (the launcher, and a run process forked already)
        _reply(conn, ready)
    spares, n_roles, supplied = Spares(), 0 if unsafe else _n_roles(protocol), set()

    def supply():
        # one spare per role for each run process, forked while it parses and checks
        # (``launcher_prefork``): its parties then start without a fork on the critical path
        for key, conn in list(conns.items()):
            if conn.run_process and key not in supplied and not conn.eof:
                supplied.add(key)
                close_fds = [c.sock.fileno() for c in conns.values()] + \
                    [fd for _, fd, _ in children.values() if fd is not None]
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                for pid in spares.fork(n_roles, key, close_fds, lambda req, fds: _child(req, fds, parser)):
                    children[pid] = ("spare", _pidfd(pid), key)

    if n_roles:
        supply()
    if unsafe and not children:
        return 0
    stop = conns[ctrl.fileno()].eof or any(m.get("op") == "exit" for m in early)
    if stop:        # the launcher went away while we imported: nobody outlives it
        for pid in children:
            _kill_server(pid)
    while not stop or children:
        fds = [c.sock for c in conns.values()] if not stop else []
        fds += [fd for _, fd, _ in children.values() if fd is not None]
        poll_all = any(fd is None for _, fd, _ in children.values())
        try:
            select.select(fds, [], [], 0.01 if poll_all or not fds else None)
        except InterruptedError:
            pass
        for pid, (role, fd, owner) in list(children.items()):
            try:
                wpid, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                wpid, status = pid, 0
            if wpid:
                if fd is not None:
                    os.close(fd)
                del children[pid]
                if role == "spare":
                    spares.forget(pid)
                if owner in conns:
                    _reply(conns[owner], {"op": "exited", "role": role, "pid": pid,
                                          "rc": os.waitstatus_to_exitcode(status)})
        if stop:
            continue
        for key, conn in list(conns.items()):
            if not select.select([conn.sock], [], [], 0)[0]:
                continue
            msgs = conn.read()
            done = conn.eof or any(m.get("op") == "exit" for m in msgs)
            if done and key == ctrl.fileno():   # the launcher is gone or done (it stopped its parties
                stop = True                     # first): nobody outlives it
                for pid in children:
                    _kill_server(pid)
                for owner in list(spares.waiting):
                    spares.drop(owner)
                break
            if done:                            # a run process is done: its parties (and spares) go with it
                for pid, (_, _, owner) in children.items():
                    if owner == key:
                        _kill_server(pid)
                spares.drop(key)
                conn.sock.close()
                del conns[key]
                continue
            for msg in msgs:
                if msg.get("op") == "fork":
                    pid = spares.take(key, msg) if not unsafe else None
                    if pid is not None and pid in children:
                        children[pid] = (msg.get("role"), children[pid][1], key)
                        _try_send(conn.sock, {"op": "started", "role": msg.get("role"), "pid": pid, "spare": True})
                    else:
                        _fork_party(msg, conn.sock, key, conns, children, unsafe, parser, spares.fds())
                elif msg.get("op") == "run" and key == ctrl.fileno():
                    _fork_run(msg, conn, conns, children, ready, spares.fds())
        if n_roles and not stop:
            supply()
    return 0


def _n_roles(protocol: str) -> int:
    """How many parties a run of ``protocol`` has (spares to fork for it); 0 if unknown."""
    registry = sys.modules.get("secinfer.protocols.registry")
    try:
        return len(registry.get(protocol).roles) if registry is not None else 0
    except Exception:  # noqa: BLE001 - no spares then
        return 0


def _fork_party(msg: dict, sock: socket.socket, key: int, conns: dict, children: dict, unsafe: str | None,
                parser=None, more_fds: list[int] = ()) -> None:
    """``fork``: one party, forked from this server; the reply goes to who asked. ``unsafe``:
    ``fork_unsafe()`` when the server became ready (it imports and starts nothing after)."""
    why = unsafe
    if why:
        _try_send(sock, {"op": "error", "role": msg.get("role"), "message": why})
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    close_fds = [c.sock.fileno() for c in conns.values()] + [fd for _, fd, _ in children.values() if fd is not None]
    close_fds += list(more_fds)   # (the spares' pipes)
    try:
        pid = os.fork()
    except OSError as e:
        _try_send(sock, {"op": "error", "role": msg.get("role"), "message": f"fork failed: {e}"})
        return
    if pid == 0:
        _child(msg, close_fds, parser)   # never returns
    children[pid] = (msg.get("role"), _pidfd(pid), key)
    _try_send(sock, {"op": "started", "role": msg.get("role"), "pid": pid})


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None                      # (then the loop polls every 10 ms)


def _fork_run(msg: dict, conn: "_Lines", conns: dict, children: dict, ready: dict | None,
              more_fds: list[int] = ()) -> None:
    """``run``: a process that runs the launcher's command in its stead (``target``, a
    function of a ``secinfer.`` module, given its own control socket to this server and the
    message), with the launcher's stdin, stdout and stderr (passed along with the message),
    its environment and working folder. It asks this server for its parties like a
    launcher; they are forked from this server, never from it (it reads the model and the
    input). The launcher is told ``started``/``exited`` (role ``run``)."""
    got, conn.fds[:] = list(conn.fds), []
    target = str(msg.get("target") or "")
    if len(got) != 3 or not target.startswith("secinfer.") or ":" not in target:
        for fd in got:
            os.close(fd)
        _reply(conn, {"op": "error", "role": "run", "message": "a run needs 3 descriptors and a target"})
        return
    why = fork_unsafe()
    if why:
        for fd in got:
            os.close(fd)
        _reply(conn, {"op": "error", "role": "run", "message": why})
        return
    msg = dict(msg, ready=ready or None, ready_seen=time.time() if ready else None)   # (None: told later)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    close_fds = [c.sock.fileno() for c in conns.values()] + [fd for _, fd, _ in children.values() if fd is not None]
    close_fds += list(more_fds)   # (the spares' pipes)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        pid = os.fork()
    except OSError as e:
        for fd in got:
            os.close(fd)
        mine.close(), theirs.close()
        _reply(conn, {"op": "error", "role": "run", "message": f"fork failed: {e}"})
        return
    if pid == 0:
        mine.close()
        run_child(msg, theirs, got, close_fds)      # never returns
    theirs.close()
    for fd in got:
        os.close(fd)
    conns[mine.fileno()] = _Lines(mine)
    conns[mine.fileno()].run_process = True
    children[pid] = ("run", _pidfd(pid), conn.sock.fileno())
    _reply(conn, {"op": "started", "role": "run", "pid": pid})


def _reply(conn: "_Lines", msg: dict) -> None:
    """``msg`` to whoever reads ``conn``: JSON, or for the command line waiting for its run
    process (``conn.plain``) one plain line about it (anything else is not sent)."""
    if not conn.plain:
        _try_send(conn.sock, msg)
    elif msg.get("role") == "run" and msg.get("op") in ("started", "exited", "error"):
        what = {"started": [msg.get("pid")], "exited": [msg.get("pid"), msg.get("rc")],
                "error": [" ".join(str(msg.get("message")).split())]}[msg["op"]]
        try:
            conn.sock.sendall(" ".join(str(w) for w in [msg["op"], *what]).encode() + b"\n")
        except OSError:
            pass


def _try_send(ctrl: socket.socket, msg: dict) -> None:
    try:
        _send(ctrl, msg)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="secinfer-fork-server", description="fork server of the local launcher")
    ap.add_argument("--fd", type=int, required=True, help="the control socket (inherited)")
    ap.add_argument("--parent", type=int, required=True, help="the launcher's pid (we die with it)")
    ap.add_argument("--protocol", required=True)
    ap.add_argument("--protocol-module", default=None)
    ap.add_argument("--transport", default=None)
    ap.add_argument("--no-onnx", action="store_true", help="do not preload the ONNX importer")
    args = ap.parse_args(argv)
    _set_pdeathsig()
    if os.getppid() != args.parent:             # the launcher died before we armed the signal
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the launcher stops us (and the parties) itself
    ctrl = socket.socket(fileno=args.fd)
    return serve(ctrl, args.protocol, args.protocol_module, args.transport, onnx=not args.no_onnx)


if __name__ == "__main__":
    sys.exit(main())
