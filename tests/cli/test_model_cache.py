"""secinfer.cli.model_cache: a model file is imported from ONNX once; the cache is keyed by
the file's bytes and the importer, encrypted under a key derived from the file, and never
holds a model that failed to import."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from secinfer.cli import model_cache
from secinfer.errors import ModelError
from secinfer.ir import onnx_import

pytestmark = pytest.mark.timeout(120)


def _dot_model(path, w, b=0.5):
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", len(w)])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 1])
    inits = [numpy_helper.from_array(np.asarray(w, np.float32).reshape(-1, 1), "w"),
             numpy_helper.from_array(np.asarray([b], np.float32), "b")]
    g = helper.make_graph([helper.make_node("Gemm", ["input", "w", "b"], ["output"])], "dot", [x], [y], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(m.SerializeToString())
    return path


def _same(a, b):
    return (a.public_bytes() == b.public_bytes() and a.meaning == b.meaning
            and list(a.initializers) == list(b.initializers)
            and all(np.array_equal(a.initializers[k], b.initializers[k])
                    and a.initializers[k].dtype == b.initializers[k].dtype for k in a.initializers))


def _count_imports(monkeypatch):
    calls = []
    real = onnx_import.load_model

    def counting(src, *a, **k):
        calls.append(src)
        return real(src, *a, **k)
    monkeypatch.setattr(onnx_import, "load_model", counting)
    return calls


W = np.linspace(-1, 1, 16)


def test_second_load_reads_the_cache_and_equals_the_import(tmp_path, monkeypatch):
    model = _dot_model(tmp_path / "m.onnx", W)
    calls = _count_imports(monkeypatch)
    first = model_cache.load_model_cached(model, tmp_path / "cache")
    assert len(calls) == 1
    entries = list((tmp_path / "cache").glob("*.ir"))
    assert len(entries) == 1 and oct(entries[0].stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "cache").stat().st_mode & 0o777) == "0o700"
    second = model_cache.load_model_cached(model, tmp_path / "cache")
    assert len(calls) == 1                                  # not imported again
    assert _same(first, second) and _same(second, onnx_import.load_model(str(model)))


def test_entries_hold_no_readable_weights_and_follow_the_file(tmp_path, monkeypatch):
    model = _dot_model(tmp_path / "m.onnx", W)
    g = model_cache.load_model_cached(model, tmp_path / "cache")
    blob = next((tmp_path / "cache").glob("*.ir")).read_bytes()
    for v in g.initializers.values():
        assert np.asarray(v).tobytes() not in blob
    assert b"Gemm" not in blob and b"secinfer-ir" not in blob   # nor the architecture
    calls = _count_imports(monkeypatch)
    _dot_model(model, W * 2)                                # the same path, other weights
    g2 = model_cache.load_model_cached(model, tmp_path / "cache")
    assert len(calls) == 1
    assert np.allclose(np.asarray(g2.initializers[next(iter(g2.initializers))]).ravel(),
                       np.asarray(g.initializers[next(iter(g.initializers))]).ravel() * 2)
    assert len(list((tmp_path / "cache").glob("*.ir"))) == 2


def test_a_changed_importer_does_not_find_old_entries(tmp_path, monkeypatch):
    model = _dot_model(tmp_path / "m.onnx", W)
    model_cache.load_model_cached(model, tmp_path / "cache")
    calls = _count_imports(monkeypatch)
    monkeypatch.setattr(model_cache, "importer_fingerprint", lambda: b"another importer")
    model_cache.load_model_cached(model, tmp_path / "cache")
    assert len(calls) == 1


def test_importer_fingerprint_covers_the_ir_sources(tmp_path, monkeypatch):
    import secinfer.ir

    fp = model_cache.importer_fingerprint()
    fake = tmp_path / "ir"
    shutil.copytree(os.path.dirname(secinfer.ir.__file__), fake, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(secinfer.ir, "__file__", str(fake / "__init__.py"))
    assert model_cache.importer_fingerprint() == fp
    (fake / "onnx_import.py").write_text((fake / "onnx_import.py").read_text() + "\n# changed\n")
    assert model_cache.importer_fingerprint() != fp


def test_a_damaged_entry_is_removed_and_the_model_imported_again(tmp_path, monkeypatch):
    model = _dot_model(tmp_path / "m.onnx", W)
    model_cache.load_model_cached(model, tmp_path / "cache")
    entry = next((tmp_path / "cache").glob("*.ir"))
    blob = bytearray(entry.read_bytes())
    blob[len(blob) // 2] ^= 1
    entry.write_bytes(bytes(blob))
    calls = _count_imports(monkeypatch)
    g = model_cache.load_model_cached(model, tmp_path / "cache")
    assert len(calls) == 1 and _same(g, onnx_import.load_model(str(model)))
    assert entry.is_file() and entry.read_bytes() != bytes(blob)    # a fresh entry


def test_a_bad_model_is_refused_every_time_and_never_cached(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf")
    for _ in range(2):
        with pytest.raises(ModelError, match="bad.onnx"):
            model_cache.load_model_cached(bad, tmp_path / "cache")
    assert list((tmp_path / "cache").glob("*")) == []


def test_a_folder_open_to_others_is_not_used(tmp_path, monkeypatch):
    model = _dot_model(tmp_path / "m.onnx", W)
    (tmp_path / "cache").mkdir(mode=0o755)
    os.chmod(tmp_path / "cache", 0o755)
    calls = _count_imports(monkeypatch)
    for _ in range(2):
        model_cache.load_model_cached(model, tmp_path / "cache")
    assert len(calls) == 2 and list((tmp_path / "cache").glob("*")) == []


def test_at_most_max_entries_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(model_cache, "MAX_ENTRIES", 2)
    for k in range(3):
        model_cache.load_model_cached(_dot_model(tmp_path / f"m{k}.onnx", W + k), tmp_path / "cache")
    assert len(list((tmp_path / "cache").glob("*.ir"))) == 2


def test_secinfer_run_twice_imports_onnx_once(tmp_path):
    """The second `secinfer run` of the same file does not load the onnx package, with the
    same output; --no-model-cache imports it afresh. (The line runs in a process forked from
    the fork server, secinfer.cli.runner, with the command's stderr: -X importtime shows what
    it imports, whichever process runs the checks.)"""
    model = _dot_model(tmp_path / "m.onnx", W)
    np.save(tmp_path / "x.npy", np.linspace(0, 1, 16).reshape(1, 16))
    code = ("import sys, json\nfrom secinfer.cli.main import main\n"
            "rc = main(sys.argv[1:])\n"
            "print(json.dumps({'rc': rc, 'onnx': 'onnx' in sys.modules}), file=sys.stderr)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    runs = []
    for extra in ([], [], ["--no-model-cache"]):
        p = subprocess.run([sys.executable, "-X", "importtime", "-c", code, "run", "-p", "astra", "-s", "semi-honest",
                            "-m", str(model), "-i", str(tmp_path / "x.npy"), "--json", *extra],
                           capture_output=True, text=True, timeout=100, env=env)
        status = json.loads(p.stderr.strip().splitlines()[-1])
        assert status["rc"] == 0, p.stderr
        imported = any(ln.startswith("import time:") and ln.rsplit("|", 1)[-1].strip() == "onnx"
                       for ln in p.stderr.splitlines())
        runs.append((status["onnx"] or imported, json.loads(p.stdout)["output"]))
    assert [r[0] for r in runs] == [True, False, True]
    assert runs[0][1] == runs[1][1] == runs[2][1]
    assert len(list((tmp_path / "xdg" / "secinfer" / "models").glob("*.ir"))) == 1
