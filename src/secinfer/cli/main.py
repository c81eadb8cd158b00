"""``secinfer``: the command line.

Errors are printed as one line (``error: ...``) with a non-zero exit; ``--debug`` shows
the traceback. Sub-commands: demo, run, party, keygen, models, inspect, bench.
"""

from __future__ import annotations

import sys

from secinfer.errors import InsecureParametersError, SecinferError

# argparse, json and traceback are imported where used: a run line forks its fork server
# first (main), and everything imported before that is on the run's critical path

EXIT_ERROR = 2
EXIT_ABORT = 3


_FIXED = "fx64f13 (64-bit ring, 13 fractional bits), fx64f16, fx32f13 (32-bit ring)"   # arith.fixed.NAMED_CONFIGS
_SECURITIES = "semi-honest | malicious | fair (which ones a protocol offers: `secinfer models`)"


def _add_common_run_args(p) -> None:
    from secinfer.protocols.registry import names

    p.formatter_class = _help_formatter()
    p.add_argument("--protocol", "-p", required=True, help=f"protocol: {', '.join(names())}")
    p.add_argument("--security", "-s", default=None, help=f"{_SECURITIES}; default: the protocol's")
    p.add_argument("--network", default="none",
                   help="none | lan | wan | bw=<MB/s>,lat=<ms> (shapes the real traffic; default none)")
    p.add_argument("--fixed", default=None, help=f"fixed-point config: {_FIXED}; default: the protocol's")
    p.add_argument("--params", default=None,
                   help="HE parameter set of HE-based protocols (crisp's default: ckks-n14-q380-128): "
                        f"{_HE_SETS}; sets named *insecure* are for tests and refused")
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="protocol-specific option, VALUE as JSON or a string (repeatable); e.g. "
                        "-o ltee_ca_seed=HEX (stamp: your own device CA), -o output=label (astra)")
    p.add_argument("--input-key", default=None, metavar="NAME",
                   help="the array to use from an .npz input holding several")


_HE_SETS = "<the HE parameter sets>"   # filled in only when help is shown (importing the HE layer is slow)


def _he_sets() -> str:
    try:
        from secinfer.crypto.he.params import PARAMETER_SETS

        return ", ".join(n for n in PARAMETER_SETS if "insecure" not in n)
    except ImportError:   # pragma: no cover - the HE layer is a dependency
        return "(the HE layer is not importable)"


_FORMATTER: list = []


def _help_formatter():
    """The parsers' help formatter: fills in the HE parameter sets when a help text is
    printed, not when the parser is built (a class made on first use: argparse is imported
    only then)."""
    if not _FORMATTER:
        import argparse

        class _HelpFormatter(argparse.HelpFormatter):
            def _get_help_string(self, action):
                h = super()._get_help_string(action) or ""
                return h.replace(_HE_SETS, _he_sets()) if _HE_SETS in h else h

        _FORMATTER.append(_HelpFormatter)
    return _FORMATTER[0]


def _add_verbosity(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-v", "--verbose", action="count", default=0,
                   help="more detail on stderr (per phase and party after a run)")
    g.add_argument("-q", "--quiet", action="store_true",
                   help="only results, warnings and trust notices (no progress, no informational notes)")


def _parse_options(items: list[str], params: str | None) -> dict:
    import json

    from secinfer.errors import ConfigError

    opts: dict = {}
    for it in items:
        if "=" not in it:
            raise ConfigError(f"--option expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            opts[k] = json.loads(v)
        except json.JSONDecodeError:
            opts[k] = v
        # test-only settings (an insecure parameter set or engine, an allow_insecure_* opt-in)
        # are honoured by protocol code only when asked for explicitly: never from the CLI
        if "insecure" in k or (isinstance(opts[k], str) and "insecure" in opts[k]):
            raise InsecureParametersError(f"option {it!r} names an insecure test-only setting; the CLI refuses it")
    if params is not None:
        if "insecure" in params:
            raise InsecureParametersError(
                f"parameter set {params!r} is marked insecure and is for tests only; the CLI refuses it")
        opts["params"] = params
    return opts


def build_parser(only: str | None = None):
    """The command line's parser; ``only="run"``: just the ``run`` sub-command (what a run
    line needs: building the other sub-parsers costs a short command measurable time)."""
    import argparse

    from secinfer import __version__

    ap = argparse.ArgumentParser(prog="secinfer", description="Private machine-learning inference.")
    ap.add_argument("--version", action="version", version=f"secinfer {__version__}")
    ap.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = ap.add_subparsers(dest="cmd", required=True)

    if only is None:
        _add_demo(sub)
    _add_run(sub)
    if only == "run":
        return ap
    _add_others(sub)
    return ap


def _add_demo(sub) -> None:
    d = sub.add_parser("demo", help="run the bundled models through every implemented protocol")
    d.add_argument("--protocol", "-p", action="append", default=None, help="only this protocol (repeatable)")
    d.add_argument("--rows", type=int, default=None, help="held-out rows per model (default: protocol's)")
    d.add_argument("--network", default="none")
    d.add_argument("--json", action="store_true")
    d.add_argument("--baselines", action="store_true", help="also run the in-repo baselines (aby3, falcon)")
    d.add_argument("--default-security-only", action="store_true",
                   help="only each protocol's default security level (default: every level it offers)")


def _add_run(sub) -> None:
    r = sub.add_parser("run", help="run one inference with every party as its own local process")
    _add_common_run_args(r)
    r.add_argument("--model", "-m", required=True, help="ONNX file, bundled:NAME or zoo:NAME (`secinfer models`)")
    r.add_argument("--input", "-i", default=None,
                   help="one sample or a batch: .npy, .npz (one array, or --input-key) or .csv (numbers, optional "
                        "header); default for bundled:NAME: its held-out test set, for zoo:NAME: a seeded "
                        "random input")
    r.add_argument("--batch", type=int, default=None, metavar="N",
                   help="zoo:NAME only: build and run the network for a batch of N (default: the input's batch)")
    r.add_argument("--output", default=None,
                   help="also write the result here, as its suffix says: .npy (output array), .npz (output and "
                        "predictions), .csv (one row per sample), .json (what --json prints)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument("--output-kind", choices=("scores", "labels"), default="scores",
                   help="scores: the model's own output (probabilities/scores as its ONNX graph defines "
                        "them; default); labels: only the predicted class (securely where the protocol can)")
    r.add_argument("--predict", dest="output_kind", action="store_const", const="labels",
                   help="alias of --output-kind labels")
    r.add_argument("--no-model-cache", action="store_true",
                   help="import the ONNX file afresh instead of reading this file's earlier import from the "
                        "per-user model cache (~/.cache/secinfer/models: entries named by a hash of the file "
                        "and encrypted under a key derived from it; docs/runtime.md)")
    r.add_argument("--allow-out-of-range", action="store_true",
                   help="run even when the input overflows the fixed-point range (the answer is then wrong)")
    r.add_argument("--timeout", type=float, default=1800.0)
    r.add_argument("--peer-timeout", type=float, default=None, metavar="SECONDS",
                   help="declare a silent peer dead after this long (default 10; heartbeats keep flowing "
                        "while a party computes or sends, so it rarely needs raising)")
    r.add_argument("--transport", choices=("tcp", "zmq"), default=None,
                   help="tcp (default: direct encrypted streams) or zmq (CurveZMQ)")
    _add_verbosity(r)
    r.add_argument("--log-dir", default=None, metavar="DIR",
                   help="keep every party's structured log here (default: kept only after a failure, "
                        "in a temporary folder the error names)")


def _add_others(sub) -> None:
    pa = sub.add_parser("party", help="run one party of a multi-host session")
    pa.add_argument("--cluster", required=True, help="cluster TOML file")
    pa.add_argument("--id", required=True, dest="party_id", help="this party's id in the cluster file")
    pa.add_argument("--keys", default=None, help="folder with this party's secret key (default: next to the cluster file)")
    _add_common_run_args(pa)
    pa.add_argument("--model", "-m", default=None)
    pa.add_argument("--input", "-i", default=None, help="the input role's input: .npy, .npz or .csv")
    pa.add_argument("--output", default=None, help="the input role writes its output here (.npy)")
    pa.add_argument("--session", default=None, help="session nonce shared by all parties (hex)")
    pa.add_argument("--result", default=None, help="write this party's result JSON here")
    pa.add_argument("--log-dir", default=None, metavar="DIR", help="write this party's structured log here")
    pa.add_argument("--allow-out-of-range", action="store_true",
                    help="input party: run a query outside the model owner's range certificate anyway (warns: the "
                         "answer may be WRONG); without it such a query is refused before anything is shared")

    k = sub.add_parser("keygen", help="write identity key pairs for parties")
    k.add_argument("--out", required=True, help="output folder")
    k.add_argument("names", nargs="+", help="party ids")

    from secinfer.cli.cluster_init import add_cluster_parser

    add_cluster_parser(sub)

    mo = sub.add_parser("models", help="list protocols, zoo networks and bundled models")
    mo.add_argument("--json", action="store_true", help="print one JSON object")

    i = sub.add_parser("inspect", help="ops, shapes, output meaning, derived bounds and which protocols "
                                       "can run a model")
    i.add_argument("model", help="ONNX file, bundled:NAME or zoo:NAME")
    i.add_argument("--calibration", default=None, metavar="X.npy",
                   help="representative inputs: the overflow verdict runs the reference executor on them")
    i.add_argument("--input-range", type=float, default=None, metavar="R",
                   help="derive bounds for every input with |x| <= R (default: the model's scaler range)")
    i.add_argument("--json", action="store_true", help="print one JSON object")

    b = sub.add_parser("bench", help="reproduce paper tables; writes JSON and PNG plots")
    b.add_argument("suite", help="runtime | he | fss | astra | astra-real | stamp | crisp | certified | peers | "
                                 "safhire | serve | all | list (`secinfer bench list`: what each reproduces and "
                                 "how long it takes)")
    b.add_argument("--out", default="results", help="results folder (default: results/)")
    b.add_argument("--quick", action="store_true", help="smaller sizes (minutes, not hours)")
    b.add_argument("--network", default=None,
                   help="network profile(s), comma separated (none | lan | wan | bw=<MB/s>,lat=<ms>; "
                        "which ones a suite accepts: its error lists them)")
    _add_verbosity(b)

    from secinfer.cli import serve_cmd  # serve, query

    serve_cmd.add_parsers(sub)


def _scan_run(argv: list[str]) -> tuple[str, str | None] | None:
    """(protocol, transport) of a ``run`` command line, read without argparse (so that its
    fork server can start before the parser is even built); None if it is not one or they
    cannot be read for sure. argparse reads the same line again: a server started for what
    it then does not confirm is stopped (``ForkServer.matches``)."""
    rest = list(argv)
    while rest and rest[0] == "--debug":
        rest = rest[1:]
    if not rest or rest[0] != "run" or "-h" in rest or "--help" in rest:
        return None
    found: dict[str, str] = {}
    for i, a in enumerate(rest[1:], 1):
        for key, names in (("protocol", ("-p", "--protocol")), ("transport", ("--transport",))):
            if a in names and i + 1 < len(rest):
                found[key] = rest[i + 1]
            elif a.startswith("--") and a.split("=", 1)[0] in names and "=" in a:
                found[key] = a.split("=", 1)[1]
            elif key == "protocol" and a.startswith("-p") and not a.startswith("--") and len(a) > 2:
                found[key] = a[2:]
    if not found.get("protocol") or found["protocol"].startswith("-"):
        return None
    return found["protocol"], found.get("transport")


def main(argv: list[str] | None = None) -> int:
    import time

    t_main = time.time()
    argv = sys.argv[1:] if argv is None else list(argv)
    early = _scan_run(argv)
    server = None
    if early is not None:   # `run`: the fork server's imports start now, beside ours
        import gc

        gc.disable()   # until the checks are done (commands.cmd_run): imports make few cycles,
        #               and collecting during them costs ~10% of their CPU
        # (before anything more is imported) the server forks the run process by itself, which
        # runs the line (secinfer.cli.runner); this process only waits for its exit code
        forked = _fork_server_now(early[0], early[1], {"argv": list(argv), "t_main": t_main,
                                                       "process_start": _process_start(t_main)})
        if forked is not None:
            from secinfer.cli.runner import wait_run

            rc = wait_run(forked[0], forked[1])
            if rc is not None:
                return rc
            # the run process could not be started (nothing has run): the line runs here
        from secinfer.runtime.launcher_fork import ForkServer

        server = ForkServer.start(early[0], transport=early[1], onnx=False)   # (run hands the model over)
    try:
        args = _parse(argv, early is not None)
        return _dispatch(args, t_main, server)
    finally:
        if early is not None:
            import gc

            gc.enable()
            if server is not None:
                server.close()     # (a no-op when the run used it: run_local stopped it)


def _fork_server_now(protocol: str, transport: str | None, run: dict | None = None) -> tuple | None:
    """Fork this process into the run's fork server (``launcher_fork.serve_forked``) when
    it is still fresh: one thread, numpy not imported (so it has computed and loaded
    nothing: it holds no data, nor will the server or the parties forked from it), no
    native library, no ZeroMQ. (pid, control socket fd, time.time()) or None; a fork
    rather than a new interpreter: ready ~0.05 s sooner, and nothing is imported before."""
    import os

    if any(m in sys.modules for m in ("numpy", "zmq", "secinfer.native.lib")):
        return None
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return None
        if run is not None:
            run = dict(run, cwd=os.getcwd())   # (a folder removed meanwhile: the line runs here)
    except OSError:
        return None
    import _socket

    try:
        a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError:
        return None
    mine, theirs = a.detach(), b.detach()
    me = os.getpid()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()      # (nothing written twice)
        except (OSError, ValueError):
            pass
    try:
        pid = os.fork()
    except OSError:
        os.close(mine), os.close(theirs)
        return None
    if pid == 0:   # the server; never returns
        code = 1
        try:
            os.close(mine)
            if run is not None:   # (the command's streams and environment, for its run process)
                run = dict(run, fds=[os.dup(0), os.dup(1), os.dup(2)], env=dict(os.environ), spawned=time_now())
            from secinfer.runtime.launcher_fork import serve_forked

            code = serve_forked(theirs, me, protocol, transport, onnx=False, run=run)
        except BaseException:  # noqa: BLE001 - the launcher sees it die and runs the line itself
            code = 1
        finally:
            os._exit(code)
    os.close(theirs)
    import time

    return pid, mine, time.time()


def _parse(argv: list[str], run_line: bool):
    if not run_line:
        return build_parser().parse_args(argv)
    import contextlib
    import io

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return build_parser(only="run").parse_args(argv)
    except SystemExit:   # a usage error: told by the whole parser, as for any other line
        build_parser().parse_args(argv)
        sys.stderr.write(said.getvalue())
        raise


def _dispatch(args, t_main: float, server, process_start: float | None = None,
              extra_events: dict | None = None) -> int:
    try:
        from secinfer.cli import commands

        fn = getattr(args, "func", None) or getattr(commands, "cmd_" + args.cmd)
        if fn is commands.cmd_run:   # its start-up report begins with this process
            events = {"process_start": process_start if process_start is not None else _process_start(t_main),
                      "main": t_main, **(extra_events or {})}
            return int(fn(args, events=events, server=server) or 0)
        return int(fn(args) or 0)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except SecinferError as e:
        if args.debug:
            import traceback

            traceback.print_exc()
        from secinfer.errors import ProtocolAbort

        print(f"error: {e}", file=sys.stderr)
        return EXIT_ABORT if isinstance(e, ProtocolAbort) else EXIT_ERROR
    except (OSError, ValueError) as e:
        if args.debug:
            import traceback

            traceback.print_exc()
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # noqa: BLE001 - last resort: still one line unless --debug
        if args.debug:
            import traceback

            traceback.print_exc()
        print(f"error: internal error {type(e).__name__}: {e} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_ERROR


def time_now() -> float:
    import time

    return time.time()


def _process_start(default: float) -> float:
    """When this process started (time.time(); Linux, to 1/100 s), else ``default``."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        import os

        return time_now() - (up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return default


if __name__ == "__main__":
    sys.exit(main())
