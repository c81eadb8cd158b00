"""The body of the fork server's *run process* (``launcher_fork._fork_run``): the process
that runs the launcher's command line in its stead, on the launcher's stdin, stdout and
stderr (dup'ed to 0-2 here), environment and working folder. Standard library only: it
runs right after ``fork`` in a server that has numpy and the protocol imported.
"""

from __future__ import annotations

import os
import signal
import socket
import sys


def run_child(msg: dict, sock: socket.socket, fds: list[int], close_fds: list[int]) -> None:
    """In the forked run process (``launcher_fork._fork_run``): never returns."""
    code = 1
    try:
        close_all(close_fds)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)    # the launcher forwards its signals
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(msg.get("env") or {})
        try:
            os.chdir(msg.get("cwd") or "/")
        except OSError:   # (a folder removed meanwhile: as the command, which still ran there)
            pass
        import importlib

        mod, fn = msg["target"].split(":", 1)
        code = getattr(importlib.import_module(mod), fn)(sock, msg)
        code = int(code or 0)
    except SystemExit as e:                      # argparse: usage errors
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the launcher reports the exit code; the traceback says why
        import traceback

        try:
            traceback.print_exc()
        except Exception:  # noqa: BLE001
            pass
        code = 1
    finally:
        exit_child(code)


def close_all(fds) -> None:
    """Close what a forked child must not keep of its server (sockets, pidfds, pipes)."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def exit_child(code: int) -> None:
    """End a forked child (a party or the run process): its exit handlers and streams, then
    ``os._exit`` (never the server's own clean-up, which the fork copied)."""
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)
