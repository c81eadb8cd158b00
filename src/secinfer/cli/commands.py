"""Implementations of the sub-commands (argparse namespaces in, exit codes out)."""

from __future__ import annotations

import json
import os
import sys

from secinfer.cli.resolve import model_path


def _say(args, note: str) -> None:
    """A ``[secinfer]`` note on stderr; ``-q`` keeps only warnings and trust notices."""
    important = note.startswith("WARNING") or "TRUSTED" in note or "INSECURE" in note
    if important or not getattr(args, "quiet", False):
        print(f"[secinfer] {note}", file=sys.stderr)


def _warn_insecure(spec, options: dict | None = None) -> None:
    """The protocol's warnings about insecure option values (e.g. SAFHIRE's shuffle=off);
    an insecure protocol itself is named by its trust notice."""
    for w in (spec.option_warnings(options or {}) if spec.option_warnings is not None else []):
        print(w, file=sys.stderr)


def cmd_run(args, events: dict | None = None, server=None) -> int:
    # First of all the fork server (secinfer.runtime.launcher_fork): it imports the parties'
    # modules while this process checks the run; it is a fresh interpreter, started before
    # the model or the input is read here, so no party inherits them. ``server``: one that
    # ``main`` started already, before parsing the command line.
    import time

    from secinfer.runtime.launcher_fork import ForkServer

    events = dict(events or {}, run_command=time.time())
    if server is not None and not server.matches(args.protocol, None, args.transport):
        server.close()
        server = None
    if server is None:
        server = ForkServer.start(args.protocol, transport=args.transport, onnx=False)   # (launch hands the model over)
    try:
        return _cmd_run(args, server, events)
    finally:
        if server is not None:
            server.close()    # (run_local has stopped it already when it ran)


def _import_numpy_one_blas_thread() -> None:
    """numpy, with OpenBLAS started with one thread (``launcher_fork.one_blas_thread_env``:
    ~0.05 s less on a run's critical path); the environment is restored at once, so that
    what this process starts later (a party spawned without the fork server) sees the
    user's own."""
    if "numpy" in sys.modules:
        return
    from secinfer.runtime.launcher_fork import one_blas_thread_env

    extra = one_blas_thread_env(os.environ)
    os.environ.update(extra)
    try:
        import numpy  # noqa: F401
    finally:
        for k in extra:
            os.environ.pop(k, None)


def _cmd_run(args, server, events: dict) -> int:
    import time

    _import_numpy_one_blas_thread()
    from secinfer.api import launch, prepare
    from secinfer.cli.files import check_output_path, load_array
    from secinfer.cli.main import _parse_options

    check_output_path(args.output)     # an unwritable --output fails now, not after the run
    options = _parse_options(args.option, args.params)
    from secinfer.runtime.launcher import check_run_options

    check_run_options(args.fixed, options, args.output)  # --output's folder, --fixed, --params: before launch
    model = args.model
    x = args.input
    if args.input_key is not None:
        if x is None:
            from secinfer.errors import ConfigError

            raise ConfigError("--input-key needs --input")
        x = load_array(x, args.input_key)
    gen_dir = None      # the folder of a certified use case's generated graph, removed on every exit
    try:
        if args.protocol == "certified" and model and not os.path.exists(model):   # a named use case
            import tempfile

            from secinfer.protocols.certified.graphs import cli_model_path

            gen_dir = tempfile.mkdtemp(prefix="secinfer-certified-")
            model = cli_model_path(model, load_array(args.input) if isinstance(x, str) else x, options,
                                   workdir=gen_dir)
        # everything (protocol, options, model, weights, input shape and range) is checked here,
        # before any party process starts
        prep = prepare(model, x, protocol=args.protocol, security=args.security,
                       network=args.network, fixed=args.fixed, options=options,
                       output_kind=getattr(args, "output_kind", "scores"),
                       allow_out_of_range=getattr(args, "allow_out_of_range", False),
                       batch=getattr(args, "batch", None),
                       model_cache=not getattr(args, "no_model_cache", False))
    except BaseException:
        _remove(gen_dir)
        raise
    events["prepared"] = time.time()
    import gc

    gc.enable()   # (main disables it for the start-up imports of a run line)
    try:
        if args.input is None and prep.model.bundled:
            _say(args, f"no --input: running the bundled held-out test set of {args.model} "
                       f"({len(prep.x)} rows)")
        for note in prep.notes:
            _say(args, note)
        settings = {k: v for k, v in (("peer_timeout", args.peer_timeout), ("transport", args.transport)) if v} or None
        res = launch(prep, timeout=args.timeout, progress=not args.json and not args.quiet,
                     cluster_settings=settings, log_dir=getattr(args, "log_dir", None),
                     fork_server=server, events=events)
    finally:
        prep.model.cleanup()
        _remove(gen_dir)
    doc = res.to_json() if (args.json or (args.output or "").lower().endswith(".json")) else None
    if args.output:
        from secinfer.cli.files import write_output

        write_output(args.output, res, doc)
        _say(args, f"wrote {args.output}")
    if args.json:
        print(json.dumps(doc, default=_json_default))
    else:
        print(res.describe())
        if args.verbose:
            from secinfer.cli.feedback import run_details

            print(run_details(res), file=sys.stderr)
    return 0


def _remove(folder: str | None) -> None:
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def cmd_party(args) -> int:
    import tempfile

    from secinfer.api import trust_note
    from secinfer.cli.files import as_npy
    from secinfer.cli.main import _parse_options
    from secinfer.protocols import registry
    from secinfer.runtime.party import party_from_cli

    spec = registry.get(args.protocol)
    if args.output is not None and not args.output.lower().endswith(".npy"):
        from secinfer.errors import ConfigError

        raise ConfigError(f"party --output {args.output!r}: a party writes its output as .npy (its raw array); "
                          f"name it *.npy")
    for line in filter(None, trust_note(spec).split("\n")):
        print(f"[secinfer] {line}", file=sys.stderr)
    options = _parse_options(args.option, args.params)
    _warn_insecure(spec, options)
    mpath = model_path(args.model) if args.model else None
    from secinfer.api import run_warning
    from secinfer.arith.fixed import get_config

    cfg = get_config(args.fixed or options.get("fixed") or spec.default_fixed)
    if run_warning(spec, cfg):
        print(f"[secinfer] {run_warning(spec, cfg)}", file=sys.stderr)
    if mpath:   # the model owner refuses NaN/infinite or unrepresentable weights before connecting
        from secinfer.ir.onnx_import import load_model
        from secinfer.ir.validate import check_weights

        check_weights(load_model(mpath), cfg)
    with tempfile.TemporaryDirectory(prefix="secinfer-party-") as tmp:
        args.input = as_npy(args.input, getattr(args, "input_key", None), tmp)   # .npz/.csv -> .npy
        return party_from_cli(args, model_path=mpath, options=options)


def cmd_keygen(args) -> int:
    from secinfer.crypto.identity import keygen

    written = keygen(args.out, args.names)
    for w in written:
        print(w)
    return 0


def cmd_models(args) -> int:
    from secinfer.cli.feedback import models_catalogue

    cat = models_catalogue()
    if getattr(args, "json", False):
        print(json.dumps(cat, default=_json_default))
        return 0
    print("Protocols:")
    for s in cat["protocols"]:
        if "error" in s:
            print(f"  {s['name']:<11} (unavailable: {s['error']})")
            continue
        flag = "  [INSECURE]" if s["insecure"] else ""
        print(f"  {s['name']:<11} {', '.join(s['securities']):<32} {s['description']}{flag}")
        if s.get("trusted"):
            print(f"  {'':<11} {s['trusted']}")
    print("\nZoo networks (seeded random weights, for timing):  secinfer run --model zoo:NAME [--batch N]")
    for m in cat["zoo"]:
        print(f"  {m['name']:<18} input {str(tuple(m['input_shape'])):<18} {m['params']:>11,} params  "
              f"{m['description']}")
    print("\nBundled trained models (scikit-learn data):  secinfer run --model bundled:NAME")
    for b in cat["bundled"]:
        val = b.get("metric_value")
        shown = f"{b['metric']} {val:.4f}" if isinstance(val, float) else ""
        print(f"  {b['name']:<18} {b['task']:<14} {b['estimator']:<40} {shown}")
    return 0


def cmd_inspect(args) -> int:
    from secinfer.api import inspect

    rep = inspect(args.model, input_range=getattr(args, "input_range", None),
                  calibration=getattr(args, "calibration", None))
    if getattr(args, "json", False):
        print(json.dumps(rep.to_json(), default=_json_default))
    else:
        print(rep.describe())
    return 2 if rep.refusal else 0


def cmd_demo(args) -> int:
    from secinfer.cli.demo import run_demo

    return run_demo(protocols=args.protocol, rows=args.rows, network=args.network, as_json=args.json,
                    baselines=args.baselines, all_securities=not args.default_security_only)


def cmd_bench(args) -> int:
    from secinfer.bench.suites import run_suite

    return run_suite(args.suite, out=args.out, quick=args.quick, network=args.network,
                     verbosity=-1 if args.quiet else args.verbose)


def cmd_cluster(args) -> int:
    from secinfer.cli.cluster_init import cmd_cluster as run

    return run(args)
