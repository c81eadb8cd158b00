"""``secinfer serve`` (a model-side party that stays up) and ``secinfer query`` (one client
session against it); see ``secinfer.runtime.serve`` and docs/runtime.md "Serving"."""

from __future__ import annotations

import argparse
import json
import signal
import sys


def add_parsers(sub) -> None:
    s = sub.add_parser("serve", help="run one model-side party that answers many client sessions")
    s.add_argument("--cluster", required=True, help="cluster TOML file")
    s.add_argument("--id", required=True, dest="party_id", help="this party's id in the cluster file")
    s.add_argument("--keys", default=None, help="folder with this party's secret key")
    s.add_argument("--protocol", "-p", required=True)
    s.add_argument("--security", "-s", default=None)
    s.add_argument("--model", "-m", default=None, help="ONNX file, bundled:NAME or zoo:NAME (model owner)")
    s.add_argument("--fixed", default=None)
    s.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE")
    s.add_argument("--params", default=None, help=argparse.SUPPRESS)
    s.add_argument("--network", default="none", help="none | lan | wan | bw=<MB/s>,lat=<ms> (session links)")
    s.add_argument("--max-sessions", type=int, default=16, help="sessions in progress at once (more are refused)")
    s.add_argument("--pool", type=int, default=8,
                   help="offline material made ahead, bounded: session seeds, and prepared offline phases "
                        "(astra; -o prep_rows=N for batches of N, default 1; 0: none)")
    s.add_argument("--grace", type=float, default=30.0,
                   help="on SIGTERM/SIGINT, seconds to let in-flight sessions finish before aborting them")
    s.add_argument("--recv-timeout", type=float, default=None)
    s.set_defaults(func=cmd_serve)

    q = sub.add_parser("query", help="one client session against running `secinfer serve` parties")
    q.add_argument("--cluster", required=True, help="cluster TOML file")
    q.add_argument("--id", default="client", dest="party_id", help="the client's id in the cluster file")
    q.add_argument("--keys", default=None, help="folder with the client's secret key")
    q.add_argument("--input", "-i", required=True, help=".npy file with one sample or a batch")
    q.add_argument("--output", default=None, help="write the output here (.npy)")
    q.add_argument("--protocol", "-p", default=None, help="refuse servers that serve another protocol")
    q.add_argument("--network", default="none")
    q.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each control answer")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.add_argument("--allow-out-of-range", action="store_true",
                   help="send a query outside the model owner's range certificate anyway (warns: the answer "
                        "may be wrong)")
    q.set_defaults(func=cmd_query)


def cmd_serve(args) -> int:
    from secinfer.cli.main import _parse_options
    from secinfer.cli.resolve import model_path
    from secinfer.runtime.serve import Server

    from secinfer.cli.commands import _warn_insecure
    from secinfer.protocols import registry

    _warn_insecure(registry.get(args.protocol))
    options = _parse_options(args.option, args.params)
    mpath = model_path(args.model) if args.model else None
    srv = Server(args.cluster, args.party_id, args.protocol, args.security, mpath, keys_dir=args.keys,
                 fixed=args.fixed, options=options, network=args.network, max_sessions=args.max_sessions,
                 pool=args.pool, recv_timeout=args.recv_timeout, grace=args.grace,
                 log=lambda line: print(line, file=sys.stderr, flush=True))

    def _stop(signum, _frame):
        print(f"serve {args.party_id}: {signal.Signals(signum).name}: finishing in-flight sessions "
              f"(up to {args.grace:g}s)", file=sys.stderr, flush=True)
        srv.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"serve {args.party_id} ({srv.role}): {srv.protocol} ({srv.security}) on {srv.entry.bind_url()}",
          file=sys.stderr, flush=True)
    p = srv.prep
    print(f"serve {args.party_id}: offline phase prepared ahead: "
          + (f"on (up to {p.capacity} items for batches of {p.rows}, made by {p.leader_id})" if p.enabled
             else f"off ({p.reason})"), file=sys.stderr, flush=True)
    st = srv.serve_forever(log=lambda m: print(f"serve {args.party_id}: {m}", file=sys.stderr, flush=True))
    return 0 if st["aborted"] == 0 else 1


def cmd_query(args) -> int:
    import numpy as np

    from secinfer.errors import ConfigError
    from secinfer.runtime.party import load_input_file
    from secinfer.runtime.serve import query

    if args.output:
        from pathlib import Path

        if not Path(args.output).resolve().parent.is_dir():
            raise ConfigError(f"--output {args.output!r}: its directory does not exist")
    x = load_input_file(args.input)
    import warnings

    from secinfer.runtime.serve_client import RangeWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RangeWarning)
        r = query(args.cluster, x, args.party_id, keys_dir=args.keys, protocol=args.protocol, network=args.network,
                  control_timeout=args.timeout, allow_out_of_range=args.allow_out_of_range)
    for w in caught:
        print(f"WARNING: {w.message}", file=sys.stderr, flush=True)
    if args.output:
        np.save(args.output, r.output)
    if args.json:
        print(json.dumps({"session_id": r.session_id, "protocol": r.protocol, "security": r.security,
                          "latency_s": r.latency_s, "prepared_item": r.info.get("prep"),
                          "range": r.info.get("range"),
                          "output": r.output.tolist()}))
    else:
        print(np.array2string(r.output, precision=4, threshold=40))
    return 0
