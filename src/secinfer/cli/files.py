"""Input and output files of the CLI: what a suffix means, checked before any party starts.

Inputs: ``.npy`` (one array), ``.npz`` (one array, or the one named by ``--input-key``),
``.csv`` (numbers, comma separated; a first row that is not numeric is a header and
skipped). Outputs: ``.npy``, ``.npz`` (arrays ``output`` and ``predictions``), ``.csv``
(one row per sample: the prediction then the outputs, with a header) and ``.json`` (the
same object ``--json`` prints). Every failure is a ``ConfigError`` naming the file.
"""

from __future__ import annotations

import csv
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from secinfer.errors import ConfigError

INPUT_SUFFIXES = (".npy", ".npz", ".csv")
OUTPUT_SUFFIXES = (".npy", ".npz", ".csv", ".json")


def _suffix(path: str) -> str:
    return Path(path).suffix.lower()


def _numeric(x: np.ndarray, where: str) -> np.ndarray:
    if x.dtype.kind not in "iufb":
        raise ConfigError(f"{where} holds {x.dtype} values; a numeric array is needed")
    return x.astype(np.float64)


def load_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """The input array of ``path`` (.npy, .npz, .csv) as float64."""
    path = os.fspath(path)
    suf = _suffix(path)
    if suf not in INPUT_SUFFIXES:
        raise ConfigError(f"input file {path!r}: unsupported suffix {suf or '(none)'!r}; use "
                          f"{', '.join(INPUT_SUFFIXES)} (np.save(path, x), np.savez(path, x=x) or a CSV of numbers)")
    if not os.path.isfile(path):
        raise ConfigError(f"input file {path!r} does not exist")
    if key is not None and suf != ".npz":
        raise ConfigError(f"--input-key {key!r} is for .npz inputs; {path!r} is a {suf} file")
    if suf == ".csv":
        return _load_csv(path)
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as e:
        raise ConfigError(f"input file {path!r} is not a readable {suf} file: {e}") from None
    if suf == ".npy":
        if not isinstance(data, np.ndarray):
            raise ConfigError(f"input file {path!r} is not a .npy array (an .npz archive renamed?)")
        return _numeric(data, f"input file {path!r}")
    if not hasattr(data, "files"):
        raise ConfigError(f"input file {path!r} is not an .npz archive (a .npy array renamed?)")
    with data:
        names = list(data.files)
        if key is None:
            if len(names) != 1:
                raise ConfigError(f"input file {path!r} holds {len(names)} arrays ({', '.join(names) or 'none'}); "
                                  f"choose one with --input-key NAME")
            key = names[0]
        elif key not in names:
            raise ConfigError(f"input file {path!r} has no array {key!r}; it holds {', '.join(names) or 'none'}")
        try:
            arr = data[key]
        except ValueError as e:   # object arrays need pickle: refused
            raise ConfigError(f"input file {path!r}, array {key!r}: {e}") from None
    return _numeric(arr, f"input file {path!r}, array {key!r}")


def _load_csv(path: str) -> np.ndarray:
    rows: list[list[float]] = []
    with open(path, newline="") as fh:
        for k, row in enumerate(csv.reader(fh)):
            cells = [c.strip() for c in row]
            if not any(cells):
                continue
            try:
                rows.append([float(c) for c in cells])
            except ValueError:
                if k == 0 and not rows:      # a header line
                    continue
                raise ConfigError(f"input file {path!r}, line {k + 1}: not a number in {row!r}") from None
    if not rows:
        raise ConfigError(f"input file {path!r} holds no numeric rows")
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        raise ConfigError(f"input file {path!r}: rows have different lengths {sorted(widths)}")
    return np.asarray(rows, dtype=np.float64)


def as_npy(path: str | None, key: str | None, workdir: str | os.PathLike) -> str | None:
    """``path`` unchanged when it is a .npy without key; else its array written to a .npy
    in ``workdir`` (for the party process, which reads .npy)."""
    if path is None:
        if key is not None:
            raise ConfigError("--input-key needs --input")
        return None
    if _suffix(path) == ".npy" and key is None:
        return path
    out = Path(workdir) / "input.npy"
    np.save(out, load_array(path, key))
    return str(out)


def check_output_path(path: str | None) -> None:
    """Refuse an ``--output`` whose suffix we cannot write, or whose folder is missing,
    before anything runs."""
    if path is None:
        return
    suf = _suffix(path)
    if suf not in OUTPUT_SUFFIXES:
        raise ConfigError(f"--output {path!r}: unsupported suffix {suf or '(none)'!r}; use one of "
                          f"{', '.join(OUTPUT_SUFFIXES)}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"--output {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ConfigError(f"--output {path!r}: folder {folder!r} is not writable")


def write_output(path: str, result, as_json: dict | None = None) -> None:
    """Write a ``secinfer.api.Result`` as its suffix says (``check_output_path`` first)."""
    check_output_path(path)
    out = np.asarray(result.output)
    preds = np.asarray(result.predictions)
    suf = _suffix(path)
    if suf == ".npy":
        np.save(path, out)
    elif suf == ".npz":
        np.savez(path, output=out, predictions=preds)
    elif suf == ".json":
        with open(path, "w") as fh:
            json.dump(as_json if as_json is not None else result.to_json(), fh, default=_plain)
            fh.write("\n")
    else:   # .csv: one row per sample
        rows = out.reshape(len(out), -1) if out.ndim >= 1 and len(out) else out.reshape(1, -1)
        p = preds.reshape(len(rows), -1)[:, 0] if preds.size == len(rows) else [None] * len(rows)
        classes = (result.meaning or {}).get("classes")
        if result.output_kind == "scores" and classes and rows.shape[1] == len(classes):
            head = [f"score_{c}" for c in classes]
        else:
            head = [result.output_kind if rows.shape[1] == 1 else f"{result.output_kind}_{j}"
                    for j in range(rows.shape[1])]
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["prediction", *head])
            for pr, r in zip(p, rows):
                w.writerow([_plain(pr), *(_cell(v) for v in r)])


def _cell(v):
    try:
        return repr(float(v))
    except (TypeError, ValueError):
        return str(v)


def _plain(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.str_):
        return str(o)
    return o if isinstance(o, (int, float, str)) or o is None else str(o)
