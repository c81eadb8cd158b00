"""``secinfer run`` run by a process forked from its fork server (issue #23 item 2).

The command line process forks its fork server first (``secinfer.cli.main._fork_server_now``,
before it parses or reads anything). Once that server has imported what the parties need
(numpy, the protocol, the transport), it forks one more process, the *run process*, which
does what the command would have done itself, in the same order and with the same checks:
it parses the line, checks everything before any party starts (``secinfer.api.prepare``),
launches the parties (forked by the server, not by the run process, which holds the model
and the input) and prints the result. It has the command's stdin, stdout and stderr (passed
over the control socket), its environment and working folder; the command waits for it,
forwards SIGINT, SIGTERM and SIGHUP to it, and exits with its exit code.

Why: numpy, the protocol and the rest are then imported once per run (by the server)
instead of twice (the command and the server), which is most of a short run's CPU.
Whatever keeps the server from being used (it cannot fork, it died, forking is unsafe),
the command runs the line itself, as before (``secinfer.cli.main``).
"""

from __future__ import annotations

import os
import sys

import _signal   # (not ``signal``: its enums cost the waiting command ~2 ms of imports)

TARGET = "secinfer.cli.runner:run_forked"
_FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)


def wait_run(server_pid: int, fd: int) -> int | None:
    """In the command, whose fork server (``secinfer.cli.main._fork_server_now``, pid
    ``server_pid``, control socket ``fd``) forks the run process by itself once it has
    imported the protocol (``launcher_fork.serve_forked(run=...)``): forward SIGINT,
    SIGTERM and SIGHUP to the run process, and return its exit code; None if it could not
    be started (nothing has run: the caller runs the line itself). The server tells us in
    plain lines (``started PID``, ``exited PID RC``, ``error MESSAGE``), so that this
    process imports nothing (no json, socket or subprocess: their imports cost it ~20-30 ms
    of CPU beside the server's own imports). The server ends when we close ``fd``; it is
    reaped here."""
    state: dict = {"pid": None, "pending": []}

    def forward(signum, _frame):
        if state["pid"] is None:          # (not started yet: forwarded once it is)
            state["pending"].append(signum)
            return
        try:
            os.kill(state["pid"], signum)
        except ProcessLookupError:
            pass

    old = {sig: _signal.signal(sig, forward) for sig in _FORWARDED}
    buf, rc, failed = b"", None, False
    try:
        while rc is None and not failed:
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:                  # the server is gone
                break
            *lines, buf = (buf + data).split(b"\n")
            for line in lines:
                op, _, rest = line.decode(errors="replace").partition(" ")
                if op == "started" and state["pid"] is None:
                    state["pid"] = int(rest)
                    for sig in state["pending"]:
                        forward(sig, None)
                elif op == "exited" and state["pid"] is not None and rest.split()[0] == str(state["pid"]):
                    rc = int(rest.split()[1])
                elif op == "error" and state["pid"] is None:
                    failed = True
    finally:
        for sig, h in old.items():
            _signal.signal(sig, h)
        os.close(fd)                      # the server stops (its run process is over, or never was)
        _reap(server_pid, 0.0 if rc is None else 2.0)
    if state["pid"] is None:
        return None
    return _exit_status(rc)


def _exit_status(rc: int | None) -> int:
    """The command's exit status for its run process's (None: it died with its fork server;
    negative: killed by that signal), with the reason on stderr."""
    if rc is None:
        print("error: the run process died with its fork server", file=sys.stderr)
        return 2
    if rc < 0:
        import signal

        print(f"error: the run process was killed by signal {signal.Signals(-rc).name}", file=sys.stderr)
        return 128 - rc
    return rc


def _reap(pid: int, grace: float) -> None:
    """Reap the fork server, SIGKILLed (with its process group) if it has not ended
    within ``grace`` seconds."""
    import select
    import time

    try:
        pfd = os.pidfd_open(pid)          # (readable once it has ended: no polling)
    except (AttributeError, OSError):
        pfd = None
    end = time.monotonic() + grace
    try:
        while True:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                return
            left = end - time.monotonic()
            if left <= 0:
                break
            if pfd is not None:
                select.select([pfd], [], [], left)
            else:
                time.sleep(min(0.002, left))
    finally:
        if pfd is not None:
            os.close(pfd)
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, _signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
        break
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def run_via_server(server, argv: list[str], t_main: float, process_start: float) -> int | None:
    """In the command: the exit code of the run process, or None if it could not be
    started (nothing has run: the caller runs the line itself)."""
    import signal

    pid = server.start_run(TARGET, {"argv": list(argv), "t_main": t_main, "process_start": process_start})
    if pid is None:
        return None

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    old = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        while pid not in server.exits and not server.dead:
            server.pump(0.5)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    return _exit_status(server.exits.get(pid))


def run_forked(sock, msg: dict) -> int:
    """In the run process (``fork_child.run_child``): the command line, as
    ``secinfer.cli.main.main`` runs a run line, with the server that forked this process."""
    import gc
    import time

    from secinfer.cli.main import _dispatch, _parse
    from secinfer.runtime.launcher_fork import ForkServer

    forked = time.time()
    server = ForkServer.attach(sock, msg)
    gc.disable()   # until the checks are done (commands.cmd_run), as main does for a run line
    gc.freeze()    # (what the server imported: never a cycle to collect, never walked by the collector)
    try:
        args = _parse(list(msg["argv"]), True)
        return _dispatch(args, float(msg["t_main"]), server, process_start=msg.get("process_start"),
                         extra_events={"run_process": forked})
    finally:
        gc.enable()
        server.close()
