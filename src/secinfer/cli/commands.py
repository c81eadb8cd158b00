"""Implementations of the sub-commands (argparse namespaces in, exit codes out)."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from secinfer.cli.resolve import model_path


def _warn_insecure(spec) -> None:
    if spec.insecure:
        print(f"WARNING: protocol {spec.name!r} is INSECURE: the client's input is sent to the server "
              "in plaintext. Use it only as a reference.", file=sys.stderr)


def cmd_run(args) -> int:
    from secinfer.api import launch, prepare
    from secinfer.cli.main import _parse_options

    options = _parse_options(args.option, args.params)
    from secinfer.runtime.launcher import check_run_options

    check_run_options(args.fixed, options, args.output)  # --output's folder, --fixed, --params: before launch
    model = args.model
    if args.protocol == "certified" and model and not os.path.exists(model):   # a named use case
        from secinfer.protocols.certified.graphs import cli_model_path
        from secinfer.runtime.party import load_input_file

        model = cli_model_path(model, load_input_file(args.input), options)
    # everything (protocol, options, model, weights, input shape and range) is checked here,
    # before any party process starts
    prep = prepare(model, args.input, protocol=args.protocol, security=args.security,
                   network=args.network, fixed=args.fixed, options=options,
                   output_kind=getattr(args, "output_kind", "scores"),
                   allow_out_of_range=getattr(args, "allow_out_of_range", False))
    try:
        for note in prep.notes:
            print(f"[secinfer] {note}", file=sys.stderr)
        settings = {k: v for k, v in (("peer_timeout", args.peer_timeout), ("transport", args.transport)) if v} or None
        res = launch(prep, timeout=args.timeout, progress=not args.json, cluster_settings=settings,
                     log_dir=getattr(args, "log_dir", None))
    finally:
        prep.model.cleanup()
    if args.output:
        np.save(args.output, np.asarray(res.output))
    if args.json:
        print(json.dumps(res.to_json(), default=_json_default))
    else:
        print(res.describe())
    return 0


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    return str(o)


def cmd_party(args) -> int:
    from secinfer.cli.main import _parse_options
    from secinfer.protocols import registry
    from secinfer.runtime.party import party_from_cli

    spec = registry.get(args.protocol)
    _warn_insecure(spec)
    options = _parse_options(args.option, args.params)
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
    return party_from_cli(args, model_path=mpath, options=options)


def cmd_keygen(args) -> int:
    from secinfer.crypto.identity import keygen

    written = keygen(args.out, args.names)
    for w in written:
        print(w)
    return 0


def cmd_models(args) -> int:
    from secinfer.ir import bundled, zoo
    from secinfer.protocols import registry

    print("Protocols:")
    for name in registry.names():
        try:
            s = registry.get(name)
            flag = "  [INSECURE]" if s.insecure else ""
            print(f"  {name:<11} {', '.join(s.securities):<32} {s.description}{flag}")
        except Exception as e:  # noqa: BLE001 - a protocol whose dependencies are missing
            print(f"  {name:<11} (unavailable: {e})")
    print("\nZoo networks (seeded random weights, for timing):  secinfer run --model zoo:NAME")
    for m in zoo.list_models():
        print(f"  {m.name:<18} input {str(m.input_shape):<18} {m.params:>11,} params  {m.description}")
    print("\nBundled trained models (scikit-learn data):  secinfer run --model bundled:NAME")
    for name in bundled.bundled_names():
        info = bundled.bundled_info(name)
        metric = info.get("metric", "")
        val = info.get("metrics", {}).get("float", {}).get(metric)
        shown = f"{metric} {val:.4f}" if isinstance(val, float) else ""
        print(f"  {name:<18} {info.get('task', ''):<14} {info.get('estimator', ''):<40} {shown}")
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

    return run_suite(args.suite, out=args.out, quick=args.quick, network=args.network)
