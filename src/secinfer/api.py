"""The Python API: ``secinfer.run(model, x, protocol=...)`` and ``secinfer.inspect(model)``.

``model`` is an ONNX file path, ``bundled:NAME``, ``zoo:NAME``, an ``onnx.ModelProto`` or a
fitted scikit-learn estimator (converted with skl2onnx). Everything is checked before any
party process starts (``prepare``): the protocol, security level, network profile,
fixed-point configuration and options; the model (import, the protocol's model check,
finite and representable weights); the query (shape, finite values, range: the bit-exact
reference executor must not overflow on it, nor the protocol's own encoding).

``run`` then starts every party as its own process on loopback (``in_process=True``:
threads over an in-memory network, for notebooks and tests) and returns a ``Result``:

* ``output``: the model's own output (scores/probabilities as the ONNX graph defines
  them), or the class labels when ``output_kind="labels"`` or when the protocol can only
  reveal the label (``Result.output_kind`` says which);
* ``predictions``: the predicted class (classifiers) or value (regressors) per sample;
* ``latency`` (online seconds), ``bytes`` (payload bytes sent by all parties),
  ``rounds`` (online rounds), ``details`` (everything the launcher measured).

The CLI (``secinfer run``/``inspect``) goes through the same functions.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from secinfer.errors import ConfigError, FixedPointRangeError, ModelError, SecinferError

OUTPUT_KINDS = ("scores", "labels")

def _spec_reveals(spec, graph, security: str, options: dict) -> str:
    fn = spec.reveals
    return fn(graph, security, options) if fn is not None else "scores"


def _spec_limits(spec, graph, cfg, options: dict) -> dict | None:
    fn = spec.value_limits
    return fn(graph, cfg, options) if fn is not None else None


def run_warning(spec, cfg=None) -> str:
    return spec.run_warning


def trust_note(spec) -> str:
    """What the user must trust beyond the parties: an insecure protocol, a trusted dealer,
    (emulated) trusted hardware and its demo key. Printed whenever the protocol runs."""
    notes = []
    if spec.insecure:
        notes.append(f"WARNING: protocol {spec.name!r} is INSECURE: the client's input is sent to the server in "
                     "plaintext. Use it only as a reference.")
    if getattr(spec, "trust", ""):
        notes.append(f"{spec.name}: {spec.trust}")
    return "\n".join(notes)


def trust_of(spec) -> dict:
    """The trust facts of a protocol, for --json: {"insecure": bool, "trusted": str}."""
    return {"insecure": bool(spec.insecure), "trusted": getattr(spec, "trust", "") or None}


# ---- models --------------------------------------------------------------------------------
@dataclass
class ModelRef:
    path: str
    label: str                 # how the user named it
    bundled: str | None = None
    tmpdir: str | None = None
    client_steps: list = field(default_factory=list)   # public, parameter-free steps the client applies

    def cleanup(self) -> None:
        if self.tmpdir:
            import shutil

            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def _is_sklearn(obj) -> bool:
    return any(c.__module__.startswith("sklearn.") for c in type(obj).__mro__) and hasattr(obj, "fit")


def sklearn_to_onnx(est, n_features: int | None = None):
    """A fitted scikit-learn estimator -> onnx.ModelProto (skl2onnx, default options)."""
    try:
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError:  # pragma: no cover - skl2onnx is a dependency
        raise ConfigError("converting a scikit-learn estimator needs skl2onnx (pip install skl2onnx)") from None
    n = getattr(est, "n_features_in_", None) or n_features
    if n is None:
        raise ModelError(f"{type(est).__name__} is not fitted (no n_features_in_); fit it first")
    try:
        return to_onnx(est, initial_types=[("X", FloatTensorType([None, int(n)]))])
    except Exception as e:  # skl2onnx reports unsupported estimators many ways
        raise ModelError(f"skl2onnx could not convert {type(est).__name__}: {e}") from None


def resolve_model(model) -> ModelRef:
    """A path, ``bundled:``/``zoo:`` name, ``onnx.ModelProto`` or fitted estimator -> ONNX file."""
    from secinfer.cli.resolve import model_path

    if isinstance(model, (str, os.PathLike)):
        s = os.fspath(model)
        bundled = s.split(":", 1)[1] if s.startswith("bundled:") else None
        # (zoo: exported once per user into the cache, secinfer.cli.resolve.zoo_cache_dir)
        return ModelRef(model_path(s), s, bundled, None)
    proto, steps = None, []
    if type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx"):
        proto, label = model, "<onnx.ModelProto>"
    elif _is_sklearn(model):
        model, steps = _split_client_steps(model)
        proto, label = sklearn_to_onnx(model), f"<{type(model).__name__}>"
    if proto is None:
        raise ConfigError(f"model must be a path, 'bundled:NAME', 'zoo:NAME', an onnx.ModelProto or a fitted "
                          f"scikit-learn estimator, not {type(model).__name__}")
    tmp = tempfile.mkdtemp(prefix="secinfer-model-")
    os.chmod(tmp, 0o700)
    path = os.path.join(tmp, "model.onnx")
    with open(path, "wb") as fh:
        fh.write(proto.SerializeToString())
    return ModelRef(path, label, None, tmp, steps)


def _split_client_steps(est):
    """A Pipeline's leading ``Normalizer`` (no parameters: nothing secret) runs on the client
    before the query; the rest of the pipeline is the model. Returns (model, client steps)."""
    if type(est).__name__ != "Pipeline" or len(est.steps) < 2:
        return est, []
    steps = []
    k = 0
    while k < len(est.steps) - 1 and type(est.steps[k][1]).__name__ == "Normalizer":
        steps.append(est.steps[k][1])
        k += 1
    if not steps:
        return est, []
    rest = est[k:] if len(est.steps) - k > 1 else est.steps[-1][1]
    return rest, steps


def load_graph(ref: ModelRef, cache: bool = False):
    """The model's IR; ``cache``: through ``secinfer.cli.model_cache`` (the ONNX import
    done once per model file and importer)."""
    from secinfer.ir.outputs import bundled_meaning

    if cache and ref.tmpdir is None:
        from secinfer.cli.model_cache import load_model_cached

        graph = load_model_cached(ref.path)
    else:
        from secinfer.ir.onnx_import import load_model

        graph = load_model(ref.path)
    if ref.bundled and not graph.meaning:
        graph.meaning = bundled_meaning(ref.bundled, graph)
    return graph


# ---- preparation ---------------------------------------------------------------------------
@dataclass
class Prepared:
    spec: Any
    security: str
    cfg: Any
    network: str
    options: dict
    model: ModelRef
    graph: Any
    x: np.ndarray
    meaning: dict
    output_kind: str
    reveals: str               # what the protocol reveals: "scores" or "labels"
    notes: list = field(default_factory=list)      # printed on stderr before the run


def _as_input(x, ref: ModelRef, graph) -> np.ndarray:
    if x is None:
        if ref.bundled:
            from secinfer.ir import bundled

            x, _ = bundled.bundled_testset(ref.bundled)
        else:
            raise ConfigError("no input given (only bundled models have a default: their held-out test set)")
    if isinstance(x, (str, os.PathLike)):
        from secinfer.cli.files import load_array

        x = load_array(x)           # .npy, .npz (one array) or .csv
    if hasattr(x, "to_numpy"):
        x = x.to_numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"the input is not a numeric array: {e}") from None
    arr = graph.batch_input(arr)
    for step in ref.client_steps:     # e.g. sklearn's Normalizer: public, applied in the clear
        arr = np.asarray(step.transform(arr), dtype=np.float64)
    graph.resolve_feeds(arr)          # shape check (ShapeError names the expected shape)
    return arr


def _zoo_batch(ref: ModelRef, graph, x, batch: int | None):
    """A ``zoo:`` network is built for one batch size: rebuild it for ``batch`` or for the
    input's batch; without an input, a seeded random input in [0, 1) (for timing).
    Returns (graph, x, notes)."""
    from secinfer.cli.resolve import model_path
    from secinfer.crypto.prg import PRG

    notes = []
    shape = graph.inputs[0].shape
    if isinstance(x, (str, os.PathLike)):
        from secinfer.cli.files import load_array

        x = load_array(x)
    if x is not None:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim == len(shape) - 1:
            x = x[None, ...]
        if batch is not None and x.ndim == len(shape) and x.shape[0] != batch:
            raise ConfigError(f"batch {batch} given but the input holds {x.shape[0]} samples")
    n = int(batch if batch is not None else (x.shape[0] if x is not None and x.ndim == len(shape) else 1))
    if n < 1:
        raise ConfigError(f"batch size must be >= 1, got {n}")
    if shape[0] is not None and shape[0] != n:
        ref.path = model_path(ref.label, workdir=ref.tmpdir, batch=n)
        graph = load_graph(ref)
    if x is None:
        full = (n, *[d for d in graph.inputs[0].shape[1:]])
        x = PRG(bytes(16), f"secinfer-zoo-input/{ref.label}").uint64(full).astype(np.float64) / 2.0 ** 64
        notes.append(f"{ref.label} has no data set: running a seeded random input in [0, 1) of batch {n} "
                     f"(timing only; --input X.npy for your own)")
    return graph, x, notes


def prepare(model, x=None, *, protocol: str, security: str | None = None, network: str = "none",
            fixed: str | None = None, options: dict | None = None, output_kind: str = "scores",
            allow_out_of_range: bool = False, batch: int | None = None,
            model_cache: bool = False) -> Prepared:
    """Check everything about one run; nothing is started. Raises a typed SecinferError.
    ``model_cache``: take the model's ONNX import from ``secinfer.cli.model_cache`` when
    this file was imported before (``secinfer run`` does; every other check still runs).

    ``batch``: for ``zoo:`` networks (built for a fixed batch size), the batch to build
    and run; by default the input's batch (a random input of batch 1 without one)."""
    from secinfer.arith.fixed import get_config
    from secinfer.ir.outputs import is_classifier, meaning_of
    from secinfer.ir.validate import check_query, check_run, check_weights
    from secinfer.net.shaping import parse_profile
    from secinfer.protocols import registry

    if output_kind not in OUTPUT_KINDS:
        raise ConfigError(f"output_kind must be one of {OUTPUT_KINDS}, not {output_kind!r}")
    if not protocol:
        raise ConfigError(f"choose a protocol: {', '.join(registry.names())}")
    spec = registry.get(protocol)
    security = security or spec.default_security
    if security not in spec.securities:
        raise ConfigError(f"protocol {spec.name!r} offers {', '.join(spec.securities)}; not {security!r}")
    parse_profile(network)
    cfg = get_config(fixed or spec.default_fixed)
    options = dict(options or {})
    import json

    try:
        json.dumps(options)
    except TypeError as e:
        raise ConfigError(f"options must be JSON-serialisable: {e}") from None
    ref = resolve_model(model)
    try:
        graph = load_graph(ref, cache=model_cache)
        zoo_notes = []
        if ref.label.startswith("zoo:"):
            graph, x, zoo_notes = _zoo_batch(ref, graph, x, batch)
        elif batch is not None:
            raise ConfigError("batch is for zoo: networks (built for one batch size); other models take "
                              "any batch: give an input with that many rows")
        meaning = meaning_of(graph)
        notes = zoo_notes + [n for n in (*trust_note(spec).split("\n"), run_warning(spec, cfg)) if n]
        if getattr(spec, "option_warnings", None) is not None:
            notes += list(spec.option_warnings(options))
        notes += [f"{type(st).__name__}(norm={getattr(st, 'norm', '?')!r}) is applied on the client before the "
                  f"query (it has no parameters: nothing secret)" for st in ref.client_steps]
        if output_kind == "labels":
            if not is_classifier(meaning):
                raise ConfigError("output_kind='labels' needs a classifier; this model's output is a value "
                                  "(regression)")
            if _spec_reveals(spec, graph, security, {**options, "output": "label"}) == "labels" \
                    and meaning.get("decision", "").startswith("threshold"):
                options.setdefault("output", "label")   # the protocol's secure comparison
        spec.check_model(graph, security)
        reveals = _spec_reveals(spec, graph, security, options)
        if reveals == "labels":
            notes.append(f"{spec.name} reveals only the predicted class for this model "
                         f"({'its secure comparison' if output_kind == 'labels' else 'ASTRA-style classification reveal'}); "
                         f"the scores are never revealed")
        elif output_kind == "labels":
            notes.append(f"{spec.name} reveals the scores; the labels are computed on the client from them "
                         f"(the protocol has no secure argmax)")
        xb = _as_input(x, ref, graph)
        # never downgraded by allow_out_of_range: weights that cannot be encoded, NaN queries
        check_weights(graph, cfg)
        if not np.all(np.isfinite(xb)):
            check_query(graph, xb, cfg)
        limits = _spec_limits(spec, graph, cfg, options)
        try:
            notes += check_run(graph.with_batch(len(xb)) if graph.inputs[0].shape[0] is None else graph,
                               xb, cfg, protocol=spec.name, limits=limits, bias_in_sum=spec.bias_in_sum)
        except FixedPointRangeError as e:
            if not allow_out_of_range:
                raise FixedPointRangeError(f"{e} (allow_out_of_range / --allow-out-of-range runs it anyway "
                                           f"and the answer is then WRONG)") from None
            notes.append(f"WARNING: running although the answer will be wrong: {e}")
    except BaseException:
        ref.cleanup()
        raise
    return Prepared(spec, security, cfg, network, options, ref, graph, xb, meaning, output_kind, reveals, notes)


# ---- results ---------------------------------------------------------------------------------
@dataclass
class Result:
    output: np.ndarray                 # the model's own output, or labels (see output_kind)
    predictions: np.ndarray            # predicted class (classifiers) or value per sample
    output_kind: str                   # "scores" or "labels"
    latency: float                     # online seconds
    bytes: int                         # payload bytes sent by all parties, all phases
    rounds: int                        # online rounds
    protocol: str
    security: str
    meaning: dict
    notes: list = field(default_factory=list)
    details: dict = field(default_factory=dict)   # latency/bytes per phase and party, raw output
    trust: dict = field(default_factory=dict)     # trust_of(spec): insecure, trusted dealer/device

    def to_json(self) -> dict:
        """The launcher's record (latency_s, bytes per party, rounds per phase, ...) plus the
        output, its kind, the predictions and the classes."""
        d = {k: v for k, v in self.details.items() if k != "raw_output"}
        d.update({"protocol": self.protocol, "security": self.security, "output_kind": self.output_kind,
                  "output": np.asarray(self.output).tolist(), "predictions": np.asarray(self.predictions).tolist(),
                  "classes": self.meaning.get("classes"), "task": self.meaning.get("task"),
                  "notes": list(self.notes), "latency_online_s": self.latency, "bytes_total": self.bytes,
                  "rounds_online": self.rounds, "trust": self.trust})
        return d

    def describe(self) -> str:
        from secinfer.ir.outputs import format_rows
        from secinfer.runtime.launcher import format_bytes

        d = self.details
        lat = d.get("latency_s", {})
        lines = [f"protocol {self.protocol} ({self.security}), network {d.get('network', 'none')}",
                 f"latency: online {self.latency:.3f}s  offline {lat.get('offline', 0.0):.3f}s  "
                 f"(wall incl. process start {lat.get('wall', 0.0):.3f}s)",
                 f"traffic: {format_bytes(self.bytes)} payload, {self.rounds} online rounds",
                 f"output: {self.output_kind}" + (f" ({self.meaning.get('score_kind')})"
                                                   if self.output_kind == "scores"
                                                   and self.meaning.get("score_kind") != "scores" else ""),
                 format_rows(self.meaning, self.output, self.predictions,
                             label_only=self.output_kind == "labels")]
        return "\n".join(lines)


def _finish(prep: Prepared, raw: np.ndarray, details: dict) -> Result:
    from secinfer.ir.outputs import labels_from_indices, model_output, predictions

    raw = np.asarray(raw)
    if prep.reveals == "labels":
        labels = labels_from_indices(prep.meaning, raw)
        out, preds, kind = labels, labels, "labels"
    else:
        preds = predictions(prep.meaning, raw)
        if prep.output_kind == "labels":
            out, kind = preds, "labels"
        else:
            out, kind = model_output(prep.meaning, raw), "scores"
    lat = details.get("latency_s", {})
    rounds = details.get("rounds", {})
    return Result(output=out, predictions=preds, output_kind=kind, latency=float(lat.get("online", 0.0)),
                  bytes=int(details.get("bytes_total", 0)), rounds=int(rounds.get("online", 0)),
                  protocol=prep.spec.name, security=prep.security, meaning=prep.meaning, notes=list(prep.notes),
                  details=details, trust=trust_of(prep.spec))


def launch(prep: Prepared, *, timeout: float = 600.0, progress: bool = False, in_process: bool = False,
           cluster_settings: dict | None = None, log_dir=None, fork_server=None, events: dict | None = None) -> Result:
    """Run a prepared job: party processes on loopback, or threads (``in_process``).
    ``fork_server``, ``events``: see ``secinfer.runtime.launcher.run_local``."""
    if in_process:
        raw, details = _run_in_process(prep, timeout)
    else:
        from secinfer.runtime.launcher import run_local

        graph, prep.graph = prep.graph, None   # (the model owner gets it; not held here meanwhile)
        res = run_local(protocol=prep.spec.name, security=prep.security, model_path=prep.model.path,
                        input_array=prep.x, network=prep.network, fixed=prep.cfg.name, options=prep.options,
                        timeout=timeout, progress=progress, cluster_settings=cluster_settings, log_dir=log_dir,
                        fork_server=fork_server, events=events, model_graph=graph)
        del graph
        raw = res.output
        details = {k: v for k, v in res.to_json().items() if k not in ("output",)}
        details["raw_output"] = raw
    return _finish(prep, raw, details)


def _run_in_process(prep: Prepared, timeout: float):
    from secinfer.crypto.prg import PRG
    from secinfer.net.channel import run_local as run_threads
    from secinfer.protocols.base import PartyJob

    spec = prep.spec
    if prep.network not in ("none", None):
        raise ConfigError("in_process runs have no network shaping; use network='none' or processes")
    meters: dict = {}

    def party(role):
        def f(ep):
            job = PartyJob(role=role, security=prep.security, fixed=prep.cfg, prg=PRG.fresh(f"party/{role}"),
                           model=prep.graph if role == spec.model_role else None,
                           input=prep.x if role == spec.input_role else None, options=dict(prep.options))
            try:
                return spec.run_party(role, ep, job)
            finally:
                meters[role] = ep.meter.summary()
        return f

    t0 = time.perf_counter()
    res = run_threads({r: party(r) for r in spec.roles}, timeout=timeout)
    wall = time.perf_counter() - t0
    errs = {r: v for r, v in res.items() if isinstance(v, BaseException)}
    if errs:
        first = next((v for v in errs.values() if type(v).__name__ not in ("PeerDeadError", "PeerAbortedError")),
                     next(iter(errs.values())))
        raise first
    out = res[spec.input_role].output
    phases = ("setup", "offline", "online")
    by_phase = {ph: sum(m["phases"][ph]["sent_payload"] for m in meters.values()) for ph in phases}
    rounds = {ph: max(m["phases"][ph]["rounds"] for m in meters.values()) for ph in phases}
    secs = {ph: max(m["phases"][ph].get("seconds", 0.0) for m in meters.values()) for ph in phases}
    secs["wall"] = wall
    details = {"latency_s": secs, "bytes_by_phase": by_phase, "bytes_total": sum(by_phase.values()),
               "rounds": rounds, "network": "none (in process)", "raw_output": out}
    return out, details


def run(model, x=None, *, protocol: str, security: str | None = None, network: str = "none",
        fixed: str | None = None, options: dict | None = None, output_kind: str = "scores",
        allow_out_of_range: bool = False, timeout: float = 600.0, in_process: bool = False,
        progress: bool = False, quiet: bool = False, batch: int | None = None) -> Result:
    """Private inference of ``model`` on ``x``; see the module docstring. ``batch``: the
    batch a ``zoo:`` network is built and run for (see ``prepare``)."""
    prep = prepare(model, x, protocol=protocol, security=security, network=network, fixed=fixed,
                   options=options, output_kind=output_kind, allow_out_of_range=allow_out_of_range,
                   batch=batch)
    try:
        if not quiet:
            for n in prep.notes:
                print(f"[secinfer] {n}", file=sys.stderr)
        return launch(prep, timeout=timeout, progress=progress, in_process=in_process)
    finally:
        prep.model.cleanup()


# ---- inspect ----------------------------------------------------------------------------------
@dataclass
class Inspection:
    graph: Any
    meaning: dict
    input_range: float
    range_source: str
    refusal: str | None                          # set when the model cannot be run at all
    bounds: dict = field(default_factory=dict)   # config name -> range report
    protocols: list = field(default_factory=list)  # dicts: protocol, security, ok, reason, reveals, warning
    extra: list = field(default_factory=list)      # protocol-specific lines (ProtocolSpec.inspect)

    def runnable(self) -> list[tuple[str, str]]:
        return [(p["protocol"], p["security"]) for p in self.protocols if p["ok"]]

    def to_json(self) -> dict:
        st = self.graph.stats()
        return {"model": self.graph.name, "inputs": [[n, list(s)] for n, s in st["inputs"]],
                "outputs": [[n, list(s)] for n, s in st["outputs"]], "ops": st["ops"], "params": st["params"],
                "macs": st["macs"], "meaning": self.meaning, "input_range": self.input_range,
                "range_source": self.range_source, "refusal": self.refusal, "bounds": self.bounds,
                "protocols": self.protocols, "extra": self.extra}

    def describe(self) -> str:
        lines = [self.graph.summary(), ""]
        m = self.meaning
        if m.get("task") == "classification":
            lines.append(f"output: {m.get('score_kind')} of a classifier; prediction = "
                         f"{m.get('decision')} over classes {m.get('classes')}"
                         + (" (guessed from the graph's last op)" if m.get("guessed") else ""))
        else:
            lines.append("output: values (regression)" + (" (guessed)" if m.get("guessed") else ""))
        if self.refusal:
            lines.append(f"REFUSED: {self.refusal}")
            return "\n".join(lines)
        lines.append(f"\nDerived bounds for {self.range_source}:")
        for name, b in self.bounds.items():
            risk = b["risks"][0] if b["risks"] else None
            worst = (b.get("worst_case_risks") or [None])[0]
            lines.append(f"  {name:<9} |output| <= {b['output_max_abs']:.4g}, error <= {b['output_error']:.3g}, "
                         f"largest |value| {b['max_abs']:.4g} (ring holds {b['value_limit']:.4g}, sums of products "
                         f"{b['product_limit']:.4g})" + (f"  OVERFLOW at {risk['node']!r}" if risk else "")
                         + (f"  (worst case over the range: may overflow at {worst['node']!r}; every query is "
                            f"checked exactly before a run)" if worst and not risk else "")
                         if not b.get("error") else f"  {name:<9} {b['error']}")
        lines.append("\nProtocols that can run it:")
        for p in self.protocols:
            extra = ""
            if p["ok"] and p.get("reveals") == "labels":
                extra = "  (reveals only the predicted class, not the scores)"
            if p.get("warning"):
                extra += "  (cost model: outputs are not exact)"
            if (p.get("trust") or {}).get("trusted"):
                extra += "  (trusts a dealer/device: see `secinfer models`)"
            verdict = "yes" if p["ok"] else f"no: {p['reason']}"
            lines.append(f"  {p['protocol']:<11} {p['security']:<12} {verdict}{extra}")
        if self.extra:
            lines += [""] + list(self.extra)
        return "\n".join(lines)


def inspect(model, input_range: float | None = None, calibration=None) -> Inspection:
    """Ops, shapes, what the output means, derived bounds, and which protocols can run it.

    The overflow verdict uses a calibration input when there is one (``calibration``, or a
    bundled model's held-out set): the bit-exact reference executor runs on it, as in
    ``demo``. Otherwise derived bounds for the model's calibrated range (its input scaler's
    |standardised value| <= 1, or |x| <= ``input_range``)."""
    from secinfer.arith.fixed import get_config
    from secinfer.ir.outputs import meaning_of
    from secinfer.ir.validate import (calibrated_box, check_weights, describe_risk, limit_violation,
                                      overflow_nodes, range_report)
    from secinfer.protocols import registry

    ref = resolve_model(model)
    try:
        graph = load_graph(ref)
    finally:
        ref.cleanup()
    meaning = meaning_of(graph)
    xcal = None
    if calibration is not None:
        xcal = _as_input(calibration, ref, graph)
        box, src = None, f"the calibration input ({len(xcal)} rows)"
    elif input_range is not None:
        box, src = float(input_range), f"|x| <= {float(input_range):g} (given)"
    elif ref.bundled:
        from secinfer.ir import bundled

        xcal, _ = bundled.bundled_testset(ref.bundled)
        box, src = None, f"the bundled held-out set ({len(xcal)} rows)"
    else:
        box, src, _ = calibrated_box(graph)
    probe = None
    if xcal is None:
        # the verdict: the exact reference executor on a few typical inputs of the calibrated
        # range (the worst-case bounds over the whole box are shown, not used to refuse)
        from secinfer.ir.validate import EXACT_CHECK_MACS, probe_inputs

        if graph.stats()["macs"] * 4 <= EXACT_CHECK_MACS:
            probe = probe_inputs(graph, 4, float(np.max(box)) if input_range is not None else 1.0)
    rep = Inspection(graph, meaning, float(np.max(box)) if box is not None else float(np.max(np.abs(xcal))),
                     src, None)
    try:
        check_weights(graph)
    except SecinferError as e:
        rep.refusal = str(e)
        return rep
    g_cal = graph.with_batch(len(xcal)) if xcal is not None and graph.inputs[0].shape[0] is None else graph
    g_probe = graph.with_batch(len(probe)) if probe is not None and graph.inputs[0].shape[0] is None else graph
    for name in registry.names():
        try:
            spec = registry.get(name)
        except Exception as e:  # noqa: BLE001 - a protocol whose dependencies are missing
            rep.protocols.append({"protocol": name, "security": "-", "ok": False, "reason": f"unavailable ({e})"})
            continue
        cfg = get_config(spec.default_fixed)
        if cfg.name not in rep.bounds:
            try:
                check_weights(graph, cfg)
                rep.bounds[cfg.name] = range_report(g_cal, cfg, box=box, x=xcal)
                if xcal is None:
                    b0 = rep.bounds[cfg.name]
                    b0["worst_case_risks"], b0["risks"] = b0["risks"], []
                    if probe is not None:
                        b0["risks"] = overflow_nodes(g_probe, probe, cfg)
                        b0["probe"] = f"{len(probe)} typical inputs of {src}"
            except SecinferError as e:
                rep.bounds[cfg.name] = {"error": str(e), "risks": [], "output_max_abs": float("nan"),
                                        "output_error": float("nan"), "max_abs": float("nan"),
                                        "value_limit": cfg.max_abs, "product_limit": cfg.product_max_abs}
        b = rep.bounds[cfg.name]
        for sec in spec.securities:
            row = {"protocol": name, "security": sec, "fixed": cfg.name, "ok": True, "reason": "",
                   "warning": run_warning(spec, cfg), "trust": trust_of(spec)}
            try:
                spec.check_model(graph, sec)
                row["reveals"] = _spec_reveals(spec, graph, sec, {})
                if getattr(spec, "inspect", None) is not None:
                    rep.extra += list(spec.inspect(graph))
            except Exception as e:  # noqa: BLE001 - report why not
                row.update(ok=False, reason=str(e))
            data, g_data = (xcal, g_cal) if xcal is not None else (probe, g_probe)
            if row["ok"] and data is not None and not b.get("error"):
                try:
                    lim = _spec_limits(spec, graph, cfg, {})
                    hit = None if not lim or lim.get("values") is None else \
                        limit_violation(g_data, data, float(lim["values"]))
                except SecinferError:
                    hit = None
                if hit is not None:
                    row.update(ok=False, reason=f"on {b.get('probe', src)}, node {hit['node']!r} ({hit['op']}) "
                                                f"reaches {hit['bound']:.4g}, beyond what {name} holds "
                                                f"(|value| < {hit['limit']:.4g} at its fixed-point precision)")
            if row["ok"] and b.get("error"):
                row.update(ok=False, reason=b["error"])
            elif row["ok"] and b["risks"]:
                where = b.get("probe", src)
                row.update(ok=False, reason=f"overflow on {where}: {describe_risk(b['risks'][0], cfg, name)}")
            elif row["ok"] and spec.bias_in_sum and data is not None:   # crisp truncates acc + b 2^f
                over = overflow_nodes(g_data, data, cfg, bias_in_sum=True)
                if over:
                    row.update(ok=False, reason=f"overflow on {b.get('probe', src)}: "
                                                f"{describe_risk(over[0], cfg, name)}")
            rep.protocols.append(row)
    return rep


def query(cluster, x, party_id: str = "client", **kwargs):
    """One client session against running ``secinfer serve`` parties (docs/runtime.md,
    "Serving"); returns ``secinfer.runtime.serve.QueryResult`` (``.output``, ``.session_id``,
    ``.latency_s``). ``kwargs``: keys_dir, protocol, network, control_timeout, recv_timeout,
    allow_out_of_range (send a query outside the model owner's range certificate anyway: warns)."""
    from secinfer.runtime.serve import query as _query

    return _query(cluster, np.asarray(x, dtype=np.float64), party_id, **kwargs)
