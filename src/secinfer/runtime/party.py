"""The body of one party process: cluster + keys -> endpoint -> protocol -> output + result JSON.

Used by the local launcher (``python -m secinfer.runtime.party ...``, one process per role)
and by ``secinfer party --cluster cluster.toml --id NAME ...`` on each host of a
multi-host session. Either way the party:

1. reads the cluster file and its own secret key, derives the session id from the
   cluster and the session nonce (``secinfer.runtime.cluster``);
2. builds its endpoint (the cluster file's ``transport``) and waits for every peer (connect timeout);
3. loads its own inputs: the model (model-owner role only, ``secinfer.ir.onnx_import``;
   it also computes its public range certificate) or the input array (input role only);
3b. (``secinfer party``, not under the local launcher, which ran the exact check already)
   the range check (``secinfer.runtime.range_check.party_exchange``): the model owner sends
   its certificate, the input party checks its query against it and tells every party
   whether the session runs (with STAMP's range guard, if the query needs it) or ends
   (``FixedPointRangeError`` at the input party, ``QueryRefusedError`` at the others);
4. runs ``registry.get(protocol).run_party(role, endpoint, job)``;
5. writes the output ``.npy`` (input role; the ring output next to it as ``.ring.npy``)
   and a result JSON: ok/error, meter summary, latency per phase, transport counters.

On any exception the error goes into the result JSON and the process exits non-zero
(3 for a protocol abort, 2 otherwise). A ``ProtocolAbort`` raised without having been
announced is announced to the peers (``ep.abort``); every failure closes the endpoint,
which tells the peers "bye", so they stop at once instead of waiting for the heartbeat
timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from secinfer.errors import ConfigError, PeerAbortedError, ProtocolAbort, SecinferError

EXIT_OK, EXIT_ERROR, EXIT_ABORT = 0, 2, 3


class Terminated(SecinferError):
    """The party was stopped by a signal (the launcher stopping it after another failed)."""


def _on_sigterm(signum, _frame):
    raise Terminated(f"terminated by signal {signal.Signals(signum).name}")


def _die_with_parent(parent_pid: int | None) -> None:
    """Linux: get SIGKILL when the launcher dies, so no party outlives it.

    The launcher may have died before this ran (start-up takes a while): then our parent
    is no longer ``parent_pid`` and we exit at once.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if parent_pid and parent_pid > 0 and os.getppid() != parent_pid:
        os._exit(EXIT_ERROR)


def _jsonable(o):
    if isinstance(o, dict):
        return {str(k): _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_jsonable(v) for v in o]
    if isinstance(o, np.ndarray):
        return o.tolist() if o.size <= 1024 else f"<array {o.dtype} {o.shape}>"
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (str, int, float, bool)) or o is None:
        return o
    return str(o)


def error_record(e: BaseException) -> dict:
    rec = {"type": type(e).__name__, "module": type(e).__module__, "message": str(e)}
    if isinstance(e, ProtocolAbort):
        rec.update(check=e.check, suspect=e.suspect, detail=e.detail)
    return rec


def _write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data)))   # (compact: the C encoder; indent= takes the pure-Python one)
    os.replace(tmp, p)


def load_input_file(path: str) -> np.ndarray:
    """A numeric .npy array as float64; every failure is a ConfigError naming the file."""
    try:
        x = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ConfigError(f"input file {path!r} does not exist") from None
    except (ValueError, EOFError, OSError) as e:
        raise ConfigError(f"input file {path!r} is not a numeric .npy array: {e}") from None
    if x.dtype.kind not in "iuf":
        raise ConfigError(f"input file {path!r} holds {x.dtype} values; a numeric array is needed")
    return x.astype(np.float64)


def read_model_ir(path):
    """The model (``secinfer.ir.graph.Graph``) as the local launcher imported and checked it
    (``launcher.write_model_ir``).

    It comes from the launcher that started this party, through its private (0700) work
    folder; only the model owner is given its path. An .npz read without pickle: the
    public architecture JSON (validated as from a peer), the output meaning, the weights."""
    import json

    from secinfer.errors import ModelError
    from secinfer.ir.graph import Graph

    try:
        with np.load(path, allow_pickle=False) as z:
            g = Graph.from_public_bytes(z["architecture"].tobytes())
            head = json.loads(z["head"].tobytes().decode())
            g.initializers = {str(n): z[f"w{i}"] for i, n in enumerate(head["names"])}
            g.meaning = head["meaning"]
    except (OSError, ValueError, KeyError, TypeError, EOFError, ModelError) as e:
        raise ConfigError(f"cannot read the launcher's model file {str(path)!r}: {e}") from None
    return g


def ring_output_path(output_path: str | os.PathLike) -> Path:
    p = Path(output_path)
    stem = p.name[:-4] if p.name.endswith(".npy") else p.name
    return p.with_name(stem + ".ring.npy")


def endpoint_class(transport: str):
    """The ``Endpoint`` class of a cluster file's ``transport`` ("tcp" or "zmq")."""
    if transport == "tcp":
        from secinfer.net.tcp_transport import TcpEndpoint
        return TcpEndpoint
    if transport == "zmq":
        from secinfer.net.zmq_transport import ZmqEndpoint
        return ZmqEndpoint
    raise ConfigError(f"unknown transport {transport!r}")


def run_party_process(cluster_path, party_id: str, protocol: str, security: str | None = None,
                      model_path=None, input_path=None, output_path=None, network: str | None = "none",
                      result_path=None, options: dict | None = None, session_nonce: str | bytes | None = None,
                      *, keys_dir=None, fixed: str | None = None, protocol_module: str | None = None,
                      recv_timeout: float | None = None, progress_file=None, log_dir=None,
                      model_ir=None, range_check: bool = True, allow_out_of_range: bool = False) -> dict:
    """Run one party to completion; returns the result record (also written to ``result_path``).
    ``progress_file``: a live status file for the launcher (``secinfer.runtime.progress``).

    Never raises for protocol or network failures: they are recorded in the result
    (``ok`` False, ``error``) and in ``exit_code``. With ``log_dir``, the party writes its
    structured log (``secinfer.runtime.partylog``) to ``log_dir/party-<id>.log.jsonl``
    (named in the record as ``log_path``). ``model_ir``: the model owner reads the model as
    the local launcher already imported and checked it (``launcher.write_model_ir``) instead
    of importing ``model_path`` again.

    ``range_check`` (every party of a session must pass the same): the session-start range
    check against the model owner's certificate (``secinfer.runtime.range_check``); False
    only where the query was already checked exactly with the model (the local launcher).
    ``allow_out_of_range`` (the input party): run a query outside the certificate anyway,
    with a ``RangeWarning`` (the answer may be wrong).
    """
    from secinfer.arith.fixed import get_config
    from secinfer.crypto.prg import PRG
    from secinfer.net.shaping import parse_profile
    from secinfer.protocols import registry
    from secinfer.protocols.base import PartyJob
    from secinfer.runtime.cluster import load_cluster

    t0 = time.perf_counter()
    rec: dict = {"party": party_id, "role": None, "protocol": protocol, "security": security, "ok": False,
                 "error": None, "pid": os.getpid(), "started_at": time.time(), "network": network,
                 "output_path": None, "output_ring_path": None, "meter": None, "transport": None,
                 "latency_s": {}, "info": {}, "timeline": {"started": time.time()}}
    tl = rec["timeline"]   # when each step ended (time.time(), for the launcher's start-up report)
    ep = None
    code = EXIT_ERROR
    status = None
    if progress_file:
        from secinfer.runtime.progress import PartyStatus

        status = PartyStatus(progress_file)
    log = None
    if log_dir is not None:
        from secinfer.runtime.partylog import PartyLog

        try:
            Path(log_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
            log = PartyLog(Path(log_dir) / f"party-{party_id}.log.jsonl", party_id)
            rec["log_path"] = str(log.path)
            log.event("start", protocol=protocol, security=security, network=network, pid=os.getpid())
        except OSError as e:
            print(f"warning: party {party_id}: cannot write a log in {str(log_dir)!r}: {e}", file=sys.stderr)
            log = None
    try:
        if protocol_module:
            registry.register_module(protocol, protocol_module)
        spec = registry.get(protocol)
        security = security or spec.default_security
        rec["security"] = security
        if security not in spec.securities:
            raise ConfigError(f"protocol {protocol!r} offers {', '.join(spec.securities)}; not {security!r}")
        cluster = load_cluster(cluster_path)
        cluster.check_roles(spec.roles)
        entry = cluster.party(party_id)
        role = rec["role"] = entry.role
        if log is not None:
            log.role = role
        identity = cluster.load_secret(party_id, keys_dir)
        profile = parse_profile(network) if network and network != "none" else None
        rec["network"] = (profile or cluster.network).name
        cfg = get_config(fixed or (options or {}).get("fixed") or spec.default_fixed)
        from secinfer.runtime.launcher import check_run_options

        check_run_options(None, options, output_path if role == spec.input_role else None)
        if role == spec.model_role and model_path is None:
            raise ConfigError(f"party {party_id} plays {role!r}, the model owner: it needs a model")
        if role == spec.input_role and input_path is None:
            raise ConfigError(f"party {party_id} plays {role!r}, the input owner: it needs an input")
        kw = {} if recv_timeout is None else {"recv_timeout": recv_timeout}
        # The endpoint first: it listens from now on, so that the peers' handshakes are
        # answered while we load. Own inputs are loaded before connecting, so that their
        # loading time is not charged to the protocol's set-up latency; a loading error is
        # still announced to the peers (connect, then "bye") so they stop at once.
        t_ep = time.perf_counter()
        ep = endpoint_class(cluster.transport).from_cluster(
            cluster, party_id, identity, cluster.session_id(session_nonce), network=profile, connect=False,
            context=f"{spec.name}/{security}/{cfg.name}", **kw)
        t_ep = time.perf_counter() - t_ep
        model = x = cert = None
        load_err: BaseException | None = None
        t_load = time.perf_counter()
        try:
            if role == spec.model_role:
                rec["info_model"] = "launcher" if model_ir is not None else "file"
                if model_ir is not None:
                    model = read_model_ir(model_ir)
                else:
                    from secinfer.ir.onnx_import import load_model  # the ir layer's importer

                    model = load_model(str(model_path))
                spec.check_model(model, security)
                if range_check and spec.input_role in spec.roles:   # public, like the model's shapes (SECURITY.md "Range certificate")
                    from secinfer.runtime.range_check import owner_certificate

                    cert = owner_certificate(spec, model, cfg, options)
            if role == spec.input_role:
                x = load_input_file(str(input_path))
        except Exception as e:  # noqa: BLE001 - re-raised below, after telling the peers
            load_err = e
        rec["latency_s"]["load"] = time.perf_counter() - t_load
        tl["loaded"] = time.time()
        if log is not None:
            log.event("loaded", seconds=round(rec["latency_s"]["load"], 4),
                      error=None if load_err is None else f"{type(load_err).__name__}: {load_err}")
        t_conn = time.perf_counter()
        if status is not None:
            status.set_stage("connect")
        try:
            ep.connect()  # also after a loading error: the peers must hear that we are leaving
        except SecinferError:
            if load_err is None:
                raise
        if load_err is not None:
            raise load_err
        rec["latency_s"]["connect"] = time.perf_counter() - t_conn + t_ep
        tl["connected"] = time.time()
        if log is not None:
            log.event("connected", seconds=round(rec["latency_s"]["connect"], 4), transport=cluster.transport)
            log.watch(ep)
        job_options = dict(options or {})
        if range_check:
            from secinfer.runtime.range_check import party_exchange

            ids = {r: cluster.by_role(r).id for r in (spec.model_role, spec.input_role) if r in spec.roles}
            t_rc = time.perf_counter()
            try:
                verdict = rec["range_check"] = party_exchange(ep, spec, role, ids, x=x, cert=cert,
                                                              allow_out_of_range=allow_out_of_range)
            finally:
                rec["latency_s"]["range_check"] = time.perf_counter() - t_rc
            if verdict == "guarded":   # the query needs the protocol's in-protocol range guard
                job_options["range_guard"] = True
            if log is not None:
                log.event("range-check", verdict=verdict)
        job = PartyJob(role=role, security=security, fixed=cfg, prg=PRG.fresh(f"party/{role}"),
                       model=model, input=x, options=job_options)
        t_run = time.perf_counter()
        if status is not None:
            status.set_stage("protocol", ep)
        res = spec.run_party(role, ep, job)
        rec["latency_s"]["protocol"] = time.perf_counter() - t_run
        tl["done"] = time.time()
        if role == spec.input_role:
            if res is None or res.output is None:
                raise SecinferError(f"protocol {protocol!r} returned no output to the input role {role!r}")
            if output_path is not None:
                np.save(output_path, np.asarray(res.output))
                rec["output_path"] = str(output_path)
                if res.output_ring is not None:
                    rp = ring_output_path(output_path)
                    np.save(rp, np.asarray(res.output_ring))
                    rec["output_ring_path"] = str(rp)
        rec["info"] = dict(res.info) if res is not None else {}
        rec["ok"] = True
        code = EXIT_OK
        if log is not None:
            log.event("done", seconds=round(rec["latency_s"]["protocol"], 4), phases={
                ph: {"seconds": round(ep.meter.seconds[ph], 4), "sent": ep.meter.total(ph, "sent"),
                     "recv": ep.meter.total(ph, "recv"), "rounds": ep.meter.depth[ph]}
                for ph in ("setup", "offline", "online")})
    except BaseException as e:  # noqa: BLE001 - every failure is reported, never swallowed silently
        if isinstance(e, ProtocolAbort) and not isinstance(e, PeerAbortedError) and ep is not None \
                and getattr(ep, "_aborted", None) is None:
            ep.abort(e.check, e.suspect, e.detail)  # a check failed without being announced
        rec["error"] = error_record(e)
        code = EXIT_ABORT if isinstance(e, ProtocolAbort) else EXIT_ERROR
        if not isinstance(e, (SecinferError, KeyboardInterrupt, SystemExit)):
            import traceback

            rec["error"]["traceback"] = traceback.format_exc()[-4000:]
        if log is not None:
            log.event("error", phase=(ep.failed_phase or ep.current_phase) if ep is not None else None,
                      step=" ".join(ep.last_step) if ep is not None and ep.last_step else None,
                      type=rec["error"]["type"], message=rec["error"]["message"])
    finally:
        if status is not None:
            status.stop("done" if code == EXIT_OK else "failed")
        if ep is not None:
            t_close = time.perf_counter()
            try:
                # a success is one only once every frame we sent has been delivered (no
                # fixed bound while the peers are alive); after a failure, a bounded wait
                if code == EXIT_OK:
                    ep.close()
                else:   # the peers learn why we leave (so they blame the right party)
                    ep.close(timeout=getattr(ep, "peer_timeout", 10.0) + 1.0,
                             reason=f"{party_id}: {rec['error']['type']}: {rec['error']['message']}"[:900])
            except Exception as e:  # noqa: BLE001 - closing must not hide the real outcome
                if code == EXIT_OK:
                    rec["ok"] = False
                    rec["error"] = error_record(e)
                    code = EXIT_ERROR
            rec["latency_s"]["close"] = time.perf_counter() - t_close
            tl["closed"] = time.time()
            if log is not None:
                log.event("closed", seconds=round(rec["latency_s"]["close"], 4), ok=rec["ok"],
                          sent=ep.stats.get("bytes_sent"), recv=ep.stats.get("bytes_recv"),
                          error=None if rec["ok"] else rec["error"]["message"])
            rec["meter"] = ep.meter.summary()
            rec["transport"] = dict(ep.stats)
            for ph in ("setup", "offline", "online"):
                rec["latency_s"][ph] = ep.meter.seconds[ph]
        rec["latency_s"]["total"] = time.perf_counter() - t0
        rec["cpu_s"] = round(time.process_time(), 4)   # this process's CPU (a forked party: since the fork)
        rec["finished_at"] = time.time()
        rec["exit_code"] = code
        if result_path is not None:
            _write_json_atomic(result_path, rec)
        if log is not None:
            log.close()
    return rec


# ---- command line -----------------------------------------------------------------------------
def add_party_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of a party process (the names ``secinfer party`` uses too)."""
    ap.add_argument("--cluster", required=True, help="cluster TOML file")
    ap.add_argument("--id", required=True, dest="party_id", help="this party's id in the cluster file")
    ap.add_argument("--keys", default=None, help="folder with this party's secret key")
    ap.add_argument("--protocol", "-p", required=True)
    ap.add_argument("--security", "-s", default=None)
    ap.add_argument("--network", default="none", help="none | lan | wan | bw=<MB/s>,lat=<ms>")
    ap.add_argument("--fixed", default=None)
    ap.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--options-json", default=None, help="protocol options as one JSON object")
    ap.add_argument("--model", "-m", default=None)
    ap.add_argument("--input", "-i", default=None)
    ap.add_argument("--output", default=None)
    ap.add_argument("--session", default=None, help="session nonce shared by all parties")
    ap.add_argument("--result", default=None, help="write this party's result JSON here")
    ap.add_argument("--protocol-module", default=None, help="register PROTOCOL from this module (plugins, tests)")
    ap.add_argument("--recv-timeout", type=float, default=None)
    ap.add_argument("--progress-file", default=None, help="write a live status line here (the local launcher)")
    ap.add_argument("--log-dir", default=None, help="write this party's structured log (JSON lines) here")
    ap.add_argument("--allow-out-of-range", action="store_true",
                    help="input party: run a query outside the model owner's range certificate anyway "
                         "(warns; the answer may be WRONG)")
    ap.add_argument("--model-ir", default=None, help=argparse.SUPPRESS)   # the local launcher's checked model
    # the local launcher ran the exact pre-launch check on model and query: no certificate exchange
    ap.add_argument("--range-checked", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--die-with-parent", type=int, nargs="?", const=-1, default=None, metavar="PID",
                    help=argparse.SUPPRESS)
    return ap


def _options_from_args(args) -> dict:
    opts: dict = {}
    raw = getattr(args, "options_json", None)
    if raw:
        try:
            opts.update(json.loads(raw))
        except json.JSONDecodeError as e:
            raise ConfigError(f"--options-json is not valid JSON: {e}") from None
    for it in getattr(args, "option", None) or []:
        k, eq, v = it.partition("=")
        if not eq:
            raise ConfigError(f"--option expects KEY=VALUE, got {it!r}")
        try:
            opts[k] = json.loads(v)
        except json.JSONDecodeError:
            opts[k] = v
    return opts


def party_from_cli(args, model_path=None, options: dict | None = None) -> int:
    """Run a party from an argparse namespace (``secinfer party`` or ``party_main``); exit code.

    ``args`` needs: cluster, party_id, protocol; optional: keys, security, network, fixed,
    model, input, output, session, result, protocol_module, recv_timeout. ``model_path``
    and ``options`` override ``args.model`` and the options in ``args``.
    """
    g = lambda name: getattr(args, name, None)  # noqa: E731
    if g("die_with_parent") is not None:
        _die_with_parent(g("die_with_parent"))
    signal.signal(signal.SIGTERM, _on_sigterm)
    opts = _options_from_args(args) if options is None else options
    rec = run_party_process(g("cluster"), g("party_id"), g("protocol"), g("security"),
                            model_path=model_path if model_path is not None else g("model"),
                            input_path=g("input"), output_path=g("output"), network=g("network") or "none",
                            result_path=g("result"), options=opts, session_nonce=g("session"),
                            keys_dir=g("keys"), fixed=g("fixed"), protocol_module=g("protocol_module"),
                            recv_timeout=g("recv_timeout"), progress_file=g("progress_file"),
                            log_dir=g("log_dir"), model_ir=g("model_ir"), range_check=not g("range_checked"),
                            allow_out_of_range=bool(g("allow_out_of_range")))
    if rec["ok"]:
        lat = rec["latency_s"]
        msg = (f"party {rec['party']} ({rec['role']}): done; offline {lat.get('offline', 0):.3f}s, "
               f"online {lat.get('online', 0):.3f}s")
        if rec["output_path"]:
            msg += f"; output written to {rec['output_path']}"
        print(msg, file=sys.stderr)
    else:
        where = f" (log: {rec['log_path']})" if rec.get("log_path") else ""
        print(f"error: party {rec['party']}: {rec['error']['type']}: {rec['error']['message']}{where}", file=sys.stderr)
    return int(rec["exit_code"])


def party_parser() -> argparse.ArgumentParser:
    """The parser of ``party_main``'s command line."""
    return add_party_arguments(argparse.ArgumentParser(prog="secinfer-party", description="run one party"))


def party_main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """A party process's command line. ``parser``: ``party_parser()`` built already (the
    launcher's fork server builds it once for all the parties it forks)."""
    args = (parser or party_parser()).parse_args(argv)
    try:
        return party_from_cli(args)
    except SecinferError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(party_main())
