"""The Python API (README example executed as written), one meaning for the output, and
the CLI's output kinds and per-sample rows."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import secinfer
from secinfer.api import sklearn_to_onnx
from secinfer.cli.main import build_parser, main
from secinfer.errors import ConfigError, ShapeError
from sk_models import fitted

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs(capsys):
    text = README.read_text()
    section = text.split("### Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md (Python API)", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "Protocols that can run it" in out and "online" in out


def test_import_secinfer_is_cheap():
    code = ("import sys, secinfer; heavy = [m for m in ('numpy', 'onnx', 'sklearn', 'secinfer.api') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_api_accepts_every_model_form(tmp_path):
    import onnx

    est, x = fitted("logreg-multi")
    proto = sklearn_to_onnx(est)
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    outs = [secinfer.run(m, x[:2], protocol="reference", in_process=True, quiet=True).output
            for m in (est, proto, str(path), path)]
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    np.testing.assert_allclose(outs[0], est.predict_proba(x[:2]), atol=2e-3)
    r = secinfer.run("bundled:cancer-logreg", None, protocol="reference", in_process=True, quiet=True)
    assert r.output.shape == (143, 1) and r.predictions.shape == (143,)


def test_api_validates_before_starting(monkeypatch):
    import secinfer.runtime.launcher as launcher

    monkeypatch.setattr(launcher, "run_local", lambda *a, **k: pytest.fail("started a party"))
    est, x = fitted("logreg-multi")
    with pytest.raises(ShapeError, match="expected shape"):
        secinfer.run(est, np.zeros((2, 5)), protocol="reference")
    with pytest.raises(ConfigError, match="offers"):
        secinfer.run(est, x, protocol="astra", security="nonsense")
    with pytest.raises(ConfigError, match="unknown protocol"):
        secinfer.run(est, x, protocol="nope")
    with pytest.raises(ConfigError, match="fixed-point"):
        secinfer.run(est, x, protocol="reference", fixed="fx16")
    with pytest.raises(ConfigError, match="network|profile"):
        secinfer.run(est, x, protocol="reference", network="carrier-pigeon")
    with pytest.raises(ConfigError, match="regression"):
        secinfer.run("bundled:diabetes-linreg", None, protocol="reference", output_kind="labels")
    with pytest.raises(ConfigError):
        secinfer.run(object(), x, protocol="reference")


def test_one_meaning_for_the_output_across_protocols():
    """The same exported model: probabilities where the protocol reveals them, labels where
    it can only reveal the class, and the same predictions everywhere."""
    est, x = fitted("logreg-binary")
    x = x[:3]
    ref = secinfer.run(est, x, protocol="reference", in_process=True, quiet=True)
    assert ref.output_kind == "scores" and ref.output.shape == (3, 2)    # as predict_proba
    np.testing.assert_allclose(ref.output, est.predict_proba(x), atol=1e-3)
    ast = secinfer.run(est, x, protocol="astra", in_process=True, quiet=True)
    assert ast.output_kind == "labels" and np.array_equal(ast.output, est.predict(x))
    assert np.array_equal(ast.predictions, ref.predictions)
    rep = secinfer.inspect(est, calibration=x)
    astra = [p for p in rep.protocols if p["protocol"] == "astra" and p["ok"]]
    assert astra and all(p["reveals"] == "labels" for p in astra)
    assert "reveals only the predicted class" in rep.describe()


def test_cli_output_kind_and_rows(tmp_path, capsys):
    args = build_parser().parse_args(["run", "-p", "reference", "-m", "bundled:digits-mlp", "--predict"])
    assert args.output_kind == "labels"
    from secinfer.ir import bundled

    x, _ = bundled.bundled_testset("digits-mlp")
    np.save(tmp_path / "x.npy", x[:3])
    assert main(["run", "-p", "reference", "-m", "bundled:digits-mlp", "-i", str(tmp_path / "x.npy")]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if re.match(r"\s+\d+\s+\d+\s", ln)]
    assert len(rows) == 3 and "predicted class" in out
    assert main(["run", "-p", "reference", "-m", "bundled:digits-mlp", "-i", str(tmp_path / "x.npy"),
                 "--output-kind", "labels", "--json", "--output", str(tmp_path / "y.npy")]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["output_kind"] == "labels" and rec["output"] == rec["predictions"] and len(rec["output"]) == 3
    assert np.load(tmp_path / "y.npy").shape == (3,)
    assert main(["inspect", "bundled:cancer-logreg", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["meaning"]["decision"] == "threshold:0.5" and rep["protocols"]


def test_a_leading_normalizer_runs_on_the_client():
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer

    x, y = load_iris(return_X_y=True)
    est = make_pipeline(Normalizer(), LogisticRegression(max_iter=500)).fit(x, y)
    res = secinfer.run(est, x[:4], protocol="reference", in_process=True, quiet=True)
    assert np.array_equal(res.predictions, est.predict(x[:4]))
    np.testing.assert_allclose(res.output, est.predict_proba(x[:4]), atol=2e-3)
    assert any("applied on the client" in n for n in res.notes)


def test_zoo_names_run_and_leave_no_file_behind(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    res = secinfer.run("zoo:secureml-a", np.zeros((1, 784)), protocol="reference", in_process=True, quiet=True)
    assert res.output.shape == (1, 10)
    assert not list(tmp_path.glob("secinfer-model-*"))


def test_cli_runs_an_exported_sklearn_file_in_party_processes(tmp_path, capsys):
    est, x = fitted("logreg-multi")
    (tmp_path / "m.onnx").write_bytes(sklearn_to_onnx(est).SerializeToString())
    np.save(tmp_path / "x.npy", x[:3])
    assert main(["run", "-p", "stamp", "-m", str(tmp_path / "m.onnx"), "-i", str(tmp_path / "x.npy"),
                 "--json"]) == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["output_kind"] == "scores" and rec["classes"] == [0, 1, 2]
    np.testing.assert_allclose(np.array(rec["output"]), est.predict_proba(x[:3]), atol=5e-3)
    assert rec["predictions"] == est.predict(x[:3]).tolist()
