"""Local launcher: every role of a protocol as its own OS process on loopback.

``run_local(protocol, security, model_path, input_array, ...)``

1. writes a temporary loopback cluster (fresh keys; loopback ports it holds until the
   parties exit, ``cluster.reserve_ports``) and a fresh session nonce
   (``secinfer.runtime.cluster``);
2. starts one ``python -m secinfer.runtime.party`` per role, each in its own process
   group (and with a parent-death signal, so none outlives the launcher);
3. waits; if a party fails or dies, the others get ``peer_timeout`` + a few seconds to
   notice (they normally stop at once: a failing party says "bye", a killed one stops
   heartbeating), then are terminated (SIGTERM, then SIGKILL to the whole group); every
   child is reaped;
4. merges the parties' result files into a ``RunResult`` or raises the error of the
   party that failed *first* (a party whose error is a consequence, such as
   ``PeerDeadError`` or ``PeerAbortedError``, is not the cause), named in the message.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import secinfer.errors as errors_mod
from secinfer.errors import ConfigError, ProtocolAbort, SecinferError, TimeoutError_

CONSEQUENCES = ("PeerDeadError", "PeerAbortedError", "Terminated")
_PHASES = ("setup", "offline", "online")


# (secrets, shutil, subprocess and tempfile are imported where used: every party imports
# this module, for check_run_options, and needs none of them)
MODEL_IR = "model.ir.npz"   # in the work folder: the model as the launcher imported and checked it


def write_model_ir(path: Path, graph) -> None:
    """The launcher's checked model for its model-owner party (``party.read_model_ir``),
    created 0600 in the 0700 work folder: that party need not import the ONNX file again.
    An .npz (no pickle): the IR's public architecture JSON, its output meaning (JSON) and
    one array per weight."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        save_model_ir(f, graph)


def save_model_ir(f, graph) -> None:
    """``write_model_ir``'s .npz into the open binary file ``f`` (``party.read_model_ir``
    reads it back; also the format of ``secinfer.cli.model_cache``)."""
    arrays = {f"w{i}": np.asarray(v) for i, v in enumerate(graph.initializers.values())}
    head = {"names": list(graph.initializers), "meaning": graph.meaning}
    np.savez(f, architecture=np.frombuffer(graph.public_bytes(), np.uint8),
             head=np.frombuffer(json.dumps(head).encode(), np.uint8), **arrays)


class PartyFailedError(SecinferError):
    """A party process failed in a way with no more specific error type (crash, signal)."""


@dataclass
class RunResult:
    protocol: str
    security: str
    network: str
    output: np.ndarray | None
    output_ring: np.ndarray | None
    latency_s: dict            # setup, offline, online (max over parties), total (protocol), wall
    bytes: dict                # party -> {"payload", "wire"} sent, all phases
    bytes_by_phase: dict       # phase -> payload bytes sent by all parties
    bytes_total: int           # payload bytes sent by all parties
    wire_total: int            # wire bytes (frames incl. headers) sent by all parties
    rounds: dict               # phase -> max round depth across parties
    messages: int              # messages sent by all parties
    meters: dict               # role -> Meter.summary()
    parties: dict = field(default_factory=dict)  # role -> result record
    log_dir: str | None = None                   # where the parties' logs were kept (--log-dir)
    startup: dict = field(default_factory=dict)  # how the parties were started, a timeline (startup_report)

    def to_json(self) -> dict:
        return {
            "protocol": self.protocol, "security": self.security, "network": self.network,
            "output": None if self.output is None else np.asarray(self.output).tolist(),
            "latency_s": self.latency_s, "bytes": self.bytes, "bytes_by_phase": self.bytes_by_phase,
            "bytes_total": self.bytes_total, "wire_total": self.wire_total, "rounds": self.rounds,
            "messages": self.messages,
            # per party: seconds to load its inputs, connect, each phase, the protocol, close
            "timing": {r: {k: round(v, 6) for k, v in rec.get("latency_s", {}).items()}
                       for r, rec in self.parties.items()},
            "log_dir": self.log_dir,
            "startup": self.startup,
            "info": {r: rec.get("info", {}) for r, rec in self.parties.items()},
        }

    def describe(self) -> str:
        lat = self.latency_s
        lines = [f"protocol {self.protocol} ({self.security}), network {self.network}",
                 f"output shape {None if self.output is None else tuple(np.shape(self.output))}",
                 f"latency: offline {lat['offline']:.3f}s  online {lat['online']:.3f}s  "
                 f"total {lat['total']:.3f}s  (wall incl. process start {lat['wall']:.3f}s)",
                 "rounds: " + "  ".join(f"{ph} {self.rounds.get(ph, 0)}" for ph in _PHASES),
                 f"traffic: {format_bytes(self.bytes_total)} payload, {format_bytes(self.wire_total)} on the wire, "
                 f"{self.messages} messages"]
        for role, b in self.bytes.items():
            lines.append(f"  {role:<10} sent {format_bytes(b['payload'])} payload ({format_bytes(b['wire'])} wire)")
        if self.output is not None:
            out = np.asarray(self.output)
            lines.append("output: " + np.array2string(out if out.size <= 40 else out.reshape(-1)[:40],
                                                      precision=4, threshold=40))
        return "\n".join(lines)


def format_bytes(n: float) -> str:
    """Human-readable byte count (B, KB, MB, GB, TB; powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def _module_root(module: str) -> str | None:
    """The sys.path entry a module is imported from (so a child process can import it)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    p = Path(spec.origin).resolve()
    depth = module.count(".") + (1 if p.name == "__init__.py" else 0)
    root = p.parent
    for _ in range(depth):
        root = root.parent
    return str(root)


def _party_cmd(role: str, spec, cluster: Path, work: Path, protocol: str, security: str, model_path,
               input_path, network: str, fixed, options: dict, nonce: str, protocol_module,
               progress: bool = False, parent_pid: int | None = None) -> list[str]:
    """The arguments of ``secinfer.runtime.party`` for ``role`` (without the interpreter);
    ``parent_pid``: the process the party dies with (the launcher, or the fork server)."""
    cmd = ["--cluster", str(cluster), "--id", role,
           "--protocol", protocol, "--security", security, "--network", network, "--session", nonce,
           "--result", str(work / f"result-{role}.json"), "--options-json", json.dumps(options),
           "--die-with-parent", str(parent_pid or os.getpid()),
           "--range-checked"]   # (check_run saw model and query: no certificate exchange, runtime/range_check.py)
    if fixed:
        cmd += ["--fixed", fixed]
    if protocol_module:
        cmd += ["--protocol-module", protocol_module]
    if role == spec.model_role and model_path is not None:
        cmd += ["--model", str(model_path)]
        if (work / MODEL_IR).is_file():
            cmd += ["--model-ir", str(work / MODEL_IR)]
    if role == spec.input_role:
        cmd += ["--input", str(input_path), "--output", str(work / "output.npy")]
    if progress:
        cmd += ["--progress-file", str(work / f"progress-{role}.json")]
    return cmd


def _kill_group(p, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_all(procs: dict, grace: float = 2.0) -> set:
    """SIGTERM every running party's group, SIGKILL what is left after ``grace``; reap all."""
    import subprocess

    stopped = set()
    for role, p in procs.items():
        if p.poll() is None:
            stopped.add(role)
            _kill_group(p, signal.SIGTERM)
    end = time.monotonic() + grace
    for p in procs.values():
        try:
            p.wait(max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs.values():
        _kill_group(p, signal.SIGKILL)  # also any grandchild left in the group
        try:
            p.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
    return stopped


class LauncherInterrupted(SecinferError):
    """The launcher got SIGTERM/SIGHUP: the parties are stopped and the work folder removed."""


def _cleanup_on_signals():
    """SIGTERM / SIGHUP raise ``LauncherInterrupted`` in the launcher (SIGINT already raises
    KeyboardInterrupt), so that its ``finally`` stops the parties and removes the work
    folder with the input and the keys. Returns the function that restores the handlers.
    (Only in the main thread; SIGKILL cannot be caught: ``_remove_stale_workdirs``.)"""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, _frame):
        raise LauncherInterrupted(f"the launcher was stopped by {signal.Signals(signum).name}")

    old = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):
            pass

    def restore():
        for sig, h in old.items():
            signal.signal(sig, h)
    return restore


def _remove_stale_workdirs() -> None:
    """Remove work folders of launchers of this user that died without cleaning up (SIGKILL)."""
    import shutil
    import tempfile

    base = Path(tempfile.gettempdir())
    for d in base.glob("secinfer-run-*"):
        try:
            if d.stat().st_uid != os.getuid():
                continue
            pid = int((d / "launcher.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
            continue   # its launcher is alive
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue


def _read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _log_tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip()
    except OSError:
        return ""


def _failure_error(failures: dict, order: list, log_dir: Path | None = None) -> SecinferError:
    """The error of the first failing party that is not a consequence of another failure."""
    def rank(role):
        f = failures[role]
        t = f.get("type")
        return (t in CONSEQUENCES, order.index(role) if role in order else len(order))

    first = min(failures, key=rank)
    f = failures[first]
    others = "; ".join(f"{r}: {failures[r]['type']}" for r in failures if r != first)
    if f.get("type") == "PartyFailedError":
        msg = f"party {first} {f['message']}"
    else:
        msg = f"party {first} failed: {f['type']}: {f['message']}"
    msg += f" (then {others})" if others else ""
    if log_dir is not None:
        msg += f" [party logs: {log_dir}]"
    cls = getattr(errors_mod, f.get("type") or "", None) if f.get("module") == "secinfer.errors" else None
    if isinstance(cls, type) and issubclass(cls, ProtocolAbort):
        detail = f"raised by party {first}" + (f": {f.get('detail')}" if f.get("detail") else "")
        if log_dir is not None:
            detail += f" [party logs: {log_dir}]"
        err: SecinferError = cls(f.get("check") or "unknown", f.get("suspect"), detail)
    elif isinstance(cls, type) and issubclass(cls, SecinferError):
        err = cls.__new__(cls)
        Exception.__init__(err, msg)
    else:
        err = PartyFailedError(msg)
    err.party = first
    err.party_errors = failures
    err.log_dir = None if log_dir is None else str(log_dir)
    return err


def check_run_options(fixed: str | None, options: dict | None, output_path=None) -> None:
    """Validate what the parties would otherwise refuse only after they started: the
    fixed-point configuration, a named HE parameter set (``params`` / ``he_params``) and
    the folder an output is to be written to. ConfigError naming the cause."""
    from secinfer.arith.fixed import get_config

    if fixed:
        get_config(fixed)
    for key in ("params", "he_params"):
        name = (options or {}).get(key)
        if name is None:
            continue
        try:
            from secinfer.crypto.he.params import PARAMETER_SETS
        except ImportError:   # (no HE back-end here: the party that needs it reports it)
            break
        if not isinstance(name, str) or name not in PARAMETER_SETS:
            raise ConfigError(f"unknown HE parameter set {name!r} (--params); known: {', '.join(sorted(PARAMETER_SETS))}")
    if output_path is not None:
        parent = Path(output_path).expanduser().resolve().parent
        if not parent.is_dir():
            raise ConfigError(f"--output {str(output_path)!r}: folder {str(parent)!r} does not exist")
        if not os.access(parent, os.W_OK):
            raise ConfigError(f"--output {str(output_path)!r}: folder {str(parent)!r} is not writable")


def run_local(protocol: str, security: str | None = None, model_path=None, input_array=None,
              network: str = "none", fixed: str | None = None, options: dict | None = None,
              timeout: float = 600.0, progress: bool = False, *, protocol_module: str | None = None,
              keep_workdir: bool = False, cluster_settings: dict | None = None,
              input_path=None, log_dir=None, start: str = "auto", fork_server=None,
              events: dict | None = None, model_graph=None, _attempts: int = 3) -> RunResult:
    """Run every role of ``protocol`` as its own process on loopback; see the module docstring.

    ``start``: "auto" forks the parties from a fork server that imported their modules once
    (``secinfer.runtime.launcher_fork``; each party is still its own process, in its own
    process group), or spawns each as its own interpreter when the server cannot be used;
    "spawn" always spawns. ``fork_server``: a server the caller started earlier (so that its
    imports overlap the caller's own work; ``secinfer run`` does); run_local stops it.
    ``events``: {name: time.time()} of the caller's own start-up steps, reported with the
    launcher's in ``RunResult.startup``. ``model_graph``: the model as the caller already
    imported and checked it from ``model_path`` (``secinfer.api.prepare``); the model owner
    then reads it from the work folder instead of importing the ONNX file again.

    ``input_array`` is an array or a path to a ``.npy`` file (``input_path`` is an alias).
    ``protocol_module`` registers ``protocol`` from that module in every party (tests,
    plugins). ``cluster_settings`` go into the cluster file (e.g. ``peer_timeout``).
    ``log_dir``: keep the parties' logs there (created 0700); without it they go to a
    temporary folder that is removed after a success and kept (and named in the error)
    after a failure.
    """
    if start not in ("auto", "spawn"):
        raise ConfigError(f"start must be 'auto' or 'spawn', not {start!r}")
    t_launch = time.time()
    transport = (cluster_settings or {}).get("transport")
    server = fork_server
    if server is not None and (start == "spawn" or not server.matches(protocol, protocol_module, transport)):
        server.close()
        server = None
    try:
        while True:
            if server is None and start == "auto":   # first, so that its imports overlap our checks
                from secinfer.runtime.launcher_fork import ForkServer

                server = ForkServer.start(protocol, protocol_module=protocol_module, transport=transport,
                                          env=_party_env(protocol_module), onnx=model_graph is None)
            try:
                return _run_local(protocol, security, model_path, input_array, network, fixed, options, timeout,
                                  progress, protocol_module, keep_workdir, cluster_settings, input_path, log_dir,
                                  start, server, dict(events or {}, launch=t_launch), model_graph, _attempts)
            except _PortTaken:          # a free port was taken meanwhile: again, with a fresh server
                _attempts -= 1
                if server is not None:
                    server.close()
                    server = None
    finally:
        if server is not None:
            server.close()


class _PortTaken(Exception):
    """A party could not listen on its port (taken since the launcher chose it): run again."""


SMALL_RUN_MACS = 1 << 16   # model MACs x batch at most this: a small run (``small_run_record_layer``)


def small_run_record_layer(model_graph, input_array, cluster_settings: dict | None = None) -> dict:
    """The parties' environment entry choosing the tcp transport's Python record layer
    for a small run, else {}. Loading the native one (the Go runtime of the native library)
    costs each party ~20-25 ms of CPU after its fork (measured on ASTRA's W1: the five
    parties' CPU 0.32 s native against 0.19 s Python, docs/runtime.md), more than it saves
    on a run of a few small frames; both layers speak the same records. Small: the model as
    the caller checked it (``model_graph``) has at most ``SMALL_RUN_MACS`` multiply-adds
    times the batch of an in-memory query; without them, a zmq cluster, or with
    ``SECINFER_TCP_NATIVE`` set by the user, nothing changes."""
    if model_graph is None or not isinstance(input_array, np.ndarray) or "SECINFER_TCP_NATIVE" in os.environ:
        return {}
    if (cluster_settings or {}).get("transport", "tcp") != "tcp":
        return {}
    try:
        batch = int(input_array.shape[0]) if input_array.ndim > 1 else 1
        macs = int(model_graph.stats()["macs"])
    except Exception:  # noqa: BLE001 - a graph without statistics: the default layer
        return {}
    return {"SECINFER_TCP_NATIVE": "0"} if macs * max(batch, 1) <= SMALL_RUN_MACS else {}


def _party_env(protocol_module: str | None) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"   # a killed party's last words reach its log
    if protocol_module:
        root = _module_root(protocol_module)
        if root:
            env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run_local(protocol, security, model_path, input_array, network, fixed, options, timeout, progress,
               protocol_module, keep_workdir, cluster_settings, input_path, log_dir, start, server, events,
               model_graph, _attempts) -> RunResult:
    import secrets
    import shutil
    import subprocess
    import tempfile

    from secinfer.net.shaping import parse_profile
    from secinfer.protocols import registry
    from secinfer.runtime.cluster import reserve_ports, write_loopback_cluster

    if protocol_module:
        registry.register_module(protocol, protocol_module)
    spec = registry.get(protocol)
    security = security or spec.default_security
    if security not in spec.securities:
        raise ConfigError(f"protocol {protocol!r} offers {', '.join(spec.securities)}; not {security!r}")
    parse_profile(network)  # fail early on a bad profile
    options = dict(options or {})
    check_run_options(fixed, options)  # before any party starts
    json.dumps(options)  # must be JSON-serialisable to reach the parties
    if input_array is None:
        input_array = input_path
    if input_array is None:
        raise ConfigError("run_local needs an input (array or .npy path)")
    if spec.model_role in spec.roles and model_path is None:
        raise ConfigError(f"protocol {protocol!r}: the model owner ({spec.model_role}) needs a model")
    settings = dict(cluster_settings or {})

    work = Path(tempfile.mkdtemp(prefix="secinfer-run-"))   # keys, input, cluster file: 0700, always removed
    os.chmod(work, 0o700)
    (work / "launcher.pid").write_text(str(os.getpid()))
    if log_dir is not None:
        logdir = Path(log_dir).expanduser()
        try:
            logdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            shutil.rmtree(work, ignore_errors=True)
            raise ConfigError(f"--log-dir {str(log_dir)!r}: {e}") from None
        keep_logs = True
    else:
        logdir = Path(tempfile.mkdtemp(prefix="secinfer-logs-"))
        keep_logs = False
    restore = _cleanup_on_signals()
    ports = None
    try:
        if isinstance(input_array, (str, os.PathLike)):
            in_path = Path(input_array)
            if not in_path.is_file():
                raise ConfigError(f"input file {str(in_path)!r} does not exist")
        else:
            in_path = work / "input.npy"
            np.save(in_path, np.asarray(input_array, dtype=np.float64))
        if model_graph is not None and spec.model_role in spec.roles and model_path is not None:
            write_model_ir(work / MODEL_IR, model_graph)
        # the parties' ports stay held by this process until they have exited, so that no
        # other launcher on this host hands them out meanwhile (cluster.PortReservation)
        ports = reserve_ports(len(spec.roles))
        cluster = write_loopback_cluster(work / "cluster", spec.roles, session=f"local-{protocol}",
                                         ports=ports.ports, **settings)
        events["cluster_written"] = time.time()
        env = _party_env(protocol_module)
        layer_env = small_run_record_layer(model_graph, input_array, cluster_settings)
        env.update(layer_env)
        nonce = secrets.token_hex(16)
        t_wall = time.perf_counter()
        procs: dict = {}                       # role -> subprocess.Popen or launcher_fork.ForkedParty
        logs: dict[str, Path] = {}
        exited: list[str] = []
        stopped: set = set()
        bar = None
        bar_wanted = bool(progress) and sys.stderr.isatty()   # live party status: terminals only
        how = {"start": "spawn", "fallback": None if start == "auto" else "start='spawn'",
               # the tcp record layer the parties were told to use (None: their default)
               "record_layer": "python (small run)" if layer_env else None}
        if server is not None:
            why = server.wait_ready(min(timeout, 120.0))
            events["fork_server_ready"] = time.time()
            if why is None:
                how["start"] = "fork"
            else:
                how["fallback"] = why
        elif start == "auto":
            how["fallback"] = "the fork server could not be started"
        try:
            def party_args(role, parent_pid=None):
                return _party_cmd(role, spec, cluster, work, protocol, security, model_path, in_path, network,
                                  fixed, options, nonce, protocol_module, progress=bar_wanted,
                                  parent_pid=parent_pid) + ["--log-dir", str(logdir)]

            for role in spec.roles:
                logs[role] = logdir / f"party-{role}.stderr.log"
            if how["start"] == "fork":
                from secinfer.runtime.launcher_fork import ForkServerError

                try:
                    procs.update(server.fork([(r, party_args(r, server.proc.pid), logs[r]) for r in spec.roles],
                                             env=layer_env))
                except ForkServerError as e:   # the parties it could not start are spawned
                    procs.update(e.started)
                    how.update(start="fork+spawn" if procs else "spawn", fallback=str(e))
            for role in spec.roles:
                if role in procs:
                    continue
                args = party_args(role)
                with os.fdopen(os.open(logs[role], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as logf:
                    procs[role] = subprocess.Popen(
                        [sys.executable, "-m", "secinfer.runtime.party", *args],
                        stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                        start_new_session=True)
            events["parties_started"] = time.time()
            how["preforked"] = sum(1 for p in procs.values() if getattr(p, "spare", False))
            cpu_at_start = time.process_time()
            _remove_stale_workdirs()   # (housekeeping while the parties run, not before they start)
            if progress:
                print(f"[secinfer] {protocol}: started {len(procs)} party processes "
                      f"({', '.join(spec.roles)}), network {network}", file=sys.stderr)
            # (a bar is drawn on a terminal only: elsewhere it is not even imported, tqdm's
            # import costs a short run ~0.05 s)
            bar = _party_bar(protocol, len(procs)) if progress and sys.stderr.isatty() else None
            last_refresh = time.monotonic()
            deadline = time.monotonic() + timeout
            grace = float(settings.get("peer_timeout", 10.0)) + 4.0
            fail_at = None
            timed_out = False
            while len(exited) < len(procs):
                now = time.monotonic()
                for role, p in procs.items():
                    if role not in exited and p.poll() is not None:
                        exited.append(role)
                        if bar is not None:
                            if bar_wanted:   # every party's stage (a forked run can end before a refresh)
                                from secinfer.runtime.progress import describe, read_status

                                line = describe({r: read_status(work / f"progress-{r}.json") for r in spec.roles})
                                bar.set_postfix_str(line if p.returncode == 0 else f"{role} FAILED | {line}")
                            else:
                                bar.set_postfix_str(f"{role} {'done' if p.returncode == 0 else 'FAILED'}")
                            bar.update(1)
                        if p.returncode != 0 and fail_at is None:
                            fail_at = now
                if len(exited) == len(procs):
                    break
                if fail_at is not None and now - fail_at > grace:
                    stopped = _stop_all(procs)
                    break
                if now > deadline:
                    timed_out = True
                    stopped = _stop_all(procs)
                    break
                if bar is not None and not bar.disable and now - last_refresh > 0.5:
                    if bar_wanted:
                        from secinfer.runtime.progress import describe, read_status

                        bar.set_postfix_str(describe({r: read_status(work / f"progress-{r}.json")
                                                      for r in spec.roles}), refresh=False)
                    bar.refresh()
                    last_refresh = now
                if server is not None and server.parties:
                    server.pump(0.02)     # returns at once when a party exits
                else:
                    time.sleep(0.02)
        finally:
            if bar is not None:
                bar.close()
            _stop_all(procs, grace=0.5)  # reaps everything; a no-op when all have exited
        wall = time.perf_counter() - t_wall
        events["parties_exited"] = time.time()

        records = {r: _read_record(work / f"result-{r}.json") for r in spec.roles}
        failures: dict = {}
        for role, p in procs.items():
            rec = records[role]
            if rec is not None and not rec.get("ok"):
                failures[role] = dict(rec["error"])
            elif rec is None or p.returncode != 0:
                rc = p.returncode
                if role in stopped:
                    failures[role] = {"type": "Terminated", "message": "stopped by the launcher"}
                elif rc is not None and rc < 0:
                    failures[role] = {"type": "PartyFailedError",
                                      "message": f"died (killed by signal {signal.Signals(-rc).name})"}
                else:
                    tail = _log_tail(logs[role])
                    failures[role] = {"type": "PartyFailedError",
                                      "message": f"exited with code {rc} and no result" + (f": {tail}" if tail else "")}
        if timed_out and not any(f["type"] not in CONSEQUENCES for f in failures.values()):
            keep_logs = True
            terr = TimeoutError_(f"{protocol}: the parties did not finish within {timeout:g}s "
                                 f"(still running: {', '.join(sorted(stopped)) or 'none'}; party logs in {logdir})")
            terr.log_dir = str(logdir)
            terr.pids = {r: p.pid for r, p in procs.items()}
            terr.party_errors = failures
            raise terr
        if failures:
            err = _failure_error(failures, exited, logdir)
            err.pids = {r: p.pid for r, p in procs.items()}
            if _attempts > 1 and "cannot listen on" in str(err):  # a free port was taken meanwhile
                raise _PortTaken(str(err))   # (run_local runs again; this run's folders are removed)
            keep_logs = True
            raise err
        result = _merge(spec, security, network, records, work, wall)
        events["merged"] = time.time()
        result.startup = startup_report(events, how, server, records)
        # CPU seconds (less sensitive to a loaded machine than wall times): this process
        # until it started the parties (for `secinfer run`: from its process start), and in all
        result.startup["cpu_s"] = {"launcher_until_parties_started": round(cpu_at_start, 4),
                                   "launcher": round(time.process_time(), 4),
                                   "fork_server_imports": None if server is None or server.info is None
                                   else server.info.get("cpu_seconds"),
                                   "parties": {r: (rec or {}).get("cpu_s") for r, rec in records.items()}}
        if keep_logs:
            result.log_dir = str(logdir)
        if progress:
            print(f"[secinfer] {protocol}: done in {wall:.2f}s (online {result.latency_s['online']:.3f}s)",
                  file=sys.stderr)
        return result
    except BaseException as e:
        if not isinstance(e, _PortTaken):   # (a retry's failed first attempt leaves nothing behind)
            keep_logs = True   # (a failure, an interrupt: the logs say what happened)
        raise
    finally:
        if ports is not None:
            ports.close()
        restore()
        if not keep_workdir:
            shutil.rmtree(work, ignore_errors=True)
        if not keep_logs:
            shutil.rmtree(logdir, ignore_errors=True)


_PARTY_STEPS = ("started", "loaded", "connected", "done", "closed")


def startup_report(events: dict, how: dict, server, records: dict) -> dict:
    """Where the time of a run went, from the first event the caller or the launcher
    recorded (``secinfer run``: its process start) to the merged result.

    ``events``: {name: time.time()} of the caller and the launcher; the parties' records
    add when each started its body (forked: right after the fork; spawned: after its
    interpreter start and imports), had loaded its inputs, was connected to every peer,
    finished the protocol and had closed. ``steps`` cuts the run into consecutive spans
    (each ends when the last party passed that point), so they add up to the whole."""
    ev = dict(events)
    if server is not None:
        ev["fork_server_spawned"] = server.t_spawn
        if server.t_ready is not None:
            ev["fork_server_ready"] = server.t_ready
        if (server.info or {}).get("at") is not None:   # by its own clock: when its imports were done
            ev["fork_server_imported"] = float(server.info["at"])
    t0 = min(ev.values())
    rel = lambda t: None if t is None else round(t - t0, 4)  # noqa: E731
    parties, last = {}, {}
    for role, rec in records.items():
        tl = (rec or {}).get("timeline") or {}
        parties[role] = {k: rel(tl.get(k)) for k in _PARTY_STEPS}
        for k in _PARTY_STEPS:
            if tl.get(k) is not None:
                last[k] = max(last.get(k, 0.0), tl[k])
    spawned = ev.get("fork_server_spawned")
    early = spawned is not None and ev.get("run_command") is not None and spawned <= ev["run_command"]
    marks = [("interpreter start and command-line imports", ev.get("main")),
             ("fork server spawn (secinfer run: before parsing)", spawned if early else None),
             ("fork server's imports, then it forks the run process", ev.get("run_process")),
             ("argument parsing", ev.get("run_command")),
             ("checks before launch (imports, model, input)", ev.get("prepared")),
             ("launcher set-up (work folder, keys, cluster file)", ev.get("cluster_written")),
             ("waiting for the fork server's imports", ev.get("fork_server_ready")),
             ("until the launcher starts the parties", ev.get("parties_started")),
             ("party start (interpreter and imports, or fork)", last.get("started")),
             ("parties load their inputs", last.get("loaded")),
             ("parties connect the mesh", last.get("connected")),
             ("protocol", last.get("done")),
             ("parties close (deliver, say bye)", last.get("closed")),
             ("launcher reaps and merges", ev.get("merged"))]
    steps, prev = {}, t0
    for name, t in marks:
        if t is not None:
            steps[name] = round(max(0.0, t - prev), 4)
            prev = max(prev, t)
    out = {"start": how.get("start"), "fallback": how.get("fallback"), "record_layer": how.get("record_layer"),
           "preforked": how.get("preforked", 0),   # parties that were spares forked ahead (launcher_prefork)
           "events": {k: rel(v) for k, v in sorted(ev.items(), key=lambda kv: kv[1])},
           "steps": steps, "parties": parties}
    if server is not None and server.info is not None:
        out["fork_server_import_s"] = server.info.get("seconds")
        if server.info.get("failed"):
            out["fork_server_failed_imports"] = server.info["failed"]
    return out


def _party_bar(protocol: str, n: int):
    """A progress bar of finished parties with the elapsed time (only on a terminal)."""
    from tqdm import tqdm

    return tqdm(total=n, desc=f"[secinfer] {protocol}: parties finished", unit="party", file=sys.stderr,
                disable=not sys.stderr.isatty(), leave=False)


def _phase_latency(phase: str, records: dict, meters: dict) -> float:
    """Latency of one phase across parties (all on this host, so wall clocks agree).

    From the moment the last party entered the phase (as if every party had waited at a
    barrier) to the moment the last party left it. A party that reached the phase early and
    waited for the others to finish the previous phase does not inflate it. Falls back to
    the longest per-party time when no party recorded a window.
    """
    wins = [m["phases"][phase].get("window") for m in meters.values()]
    wins = [w for w in wins if w]
    if not wins:
        return max(rec["latency_s"].get(phase, 0.0) for rec in records.values())
    return max(0.0, max(w[1] for w in wins) - max(w[0] for w in wins))


def _merge(spec, security: str, network: str, records: dict, work: Path, wall: float) -> RunResult:
    inp = records[spec.input_role]
    output = np.load(inp["output_path"], allow_pickle=False) if inp.get("output_path") else None
    output_ring = np.load(inp["output_ring_path"], allow_pickle=False) if inp.get("output_ring_path") else None
    meters = {r: rec["meter"] for r, rec in records.items()}
    per_party, by_phase, rounds = {}, {ph: 0 for ph in _PHASES}, {ph: 0 for ph in _PHASES}
    messages = 0
    for r, m in meters.items():
        pay = sum(m["phases"][ph]["sent_payload"] for ph in _PHASES)
        wire = sum(m["phases"][ph]["sent_wire"] for ph in _PHASES)
        per_party[r] = {"payload": pay, "wire": wire}
        for ph in _PHASES:
            by_phase[ph] += m["phases"][ph]["sent_payload"]
            rounds[ph] = max(rounds[ph], m["phases"][ph]["rounds"])
            messages += m["phases"][ph]["messages_sent"]
    lat = {ph: _phase_latency(ph, records, meters) for ph in _PHASES}
    lat["total"] = max(rec["latency_s"].get("protocol", 0.0) for rec in records.values())
    lat["wall"] = wall
    return RunResult(protocol=spec.name, security=security, network=network, output=output,
                     output_ring=output_ring, latency_s=lat, bytes=per_party, bytes_by_phase=by_phase,
                     bytes_total=sum(b["payload"] for b in per_party.values()),
                     wire_total=sum(b["wire"] for b in per_party.values()), rounds=rounds,
                     messages=messages, meters=meters, parties=records)
