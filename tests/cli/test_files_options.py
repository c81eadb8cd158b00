"""Issue #21 item 8: input and output files, option help, --version, --json listings,
default inputs and zoo batches."""

import csv
import json
import time

import numpy as np
import pytest

from cli_helpers import run_cli
from secinfer.arith.fixed import FX64, NAMED_CONFIGS
from secinfer.cli.files import check_output_path, load_array
from secinfer.cli.main import build_parser
from secinfer.crypto.he.params import PARAMETER_SETS
from secinfer.errors import ConfigError
from secinfer.ir import bundled
from secinfer.ir.fixed_exec import run_fixed
from secinfer.ir.onnx_import import load_model


@pytest.fixture(scope="module")
def digits():
    X, _ = bundled.bundled_testset("digits-mlp")
    return X[:3]


# ---- loading ----------------------------------------------------------------------------------
def test_npy_npz_csv_inputs_load_the_same_array(tmp_path, digits):
    np.save(tmp_path / "x.npy", digits)
    np.savez(tmp_path / "one.npz", anything=digits)
    np.savez(tmp_path / "two.npz", x=digits, y=np.zeros(3))
    with open(tmp_path / "x.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([f"f{j}" for j in range(digits.shape[1])])      # a header is skipped
        w.writerows(digits.tolist())
    for f, key in (("x.npy", None), ("one.npz", None), ("two.npz", "x"), ("x.csv", None)):
        assert np.array_equal(load_array(tmp_path / f, key), digits), f


@pytest.mark.parametrize("make,needle", [
    (lambda p: np.savez(p / "in.npz", a=np.ones(2), b=np.ones(2)), "--input-key"),
    (lambda p: (p / "in.txt").write_text("1 2 3"), "unsupported suffix"),
    (lambda p: (p / "in.csv").write_text("1,2\n3,x\n"), "not a number"),
    (lambda p: (p / "in.csv").write_text("1,2\n3\n"), "different lengths"),
    (lambda p: np.savez(open(p / "in.npy", "wb"), a=np.ones(2)), "not a .npy array"),   # renamed files
    (lambda p: np.save(open(p / "in.npz", "wb"), np.ones(2)), "not an .npz archive"),
])
def test_bad_input_files_are_config_errors(tmp_path, make, needle):
    make(tmp_path)
    path = next(tmp_path.iterdir())
    with pytest.raises(ConfigError, match=needle):
        load_array(path)


def test_npz_key_must_exist(tmp_path):
    np.savez(tmp_path / "in.npz", a=np.ones(2))
    with pytest.raises(ConfigError, match="no array 'b'.*holds a"):
        load_array(tmp_path / "in.npz", "b")


def test_output_suffix_and_folder_are_checked(tmp_path):
    for ok in ("y.npy", "y.npz", "y.csv", "y.json"):
        check_output_path(str(tmp_path / ok))
    with pytest.raises(ConfigError, match="unsupported suffix"):
        check_output_path(str(tmp_path / "y.txt"))
    with pytest.raises(ConfigError, match="does not exist"):
        check_output_path(str(tmp_path / "missing" / "y.npy"))


# ---- the CLI ------------------------------------------------------------------------------------
def test_run_reads_npz_writes_every_suffix(tmp_path, digits):
    np.savez(tmp_path / "in.npz", x=digits, other=np.zeros(1))
    ref = FX64.decode(run_fixed(load_model(str(bundled.bundled_path("digits-mlp"))), digits, FX64))
    outs = {}
    for suf in ("npy", "npz", "csv", "json"):
        out = tmp_path / f"y.{suf}"
        rc, so, se = run_cli("run", "-p", "reference", "-m", "bundled:digits-mlp", "-i", str(tmp_path / "in.npz"),
                             "--input-key", "x", "--output", str(out), "-q")
        assert rc == 0, se
        outs[suf] = out
    assert np.array_equal(np.load(outs["npy"]), ref)
    with np.load(outs["npz"]) as z:
        assert np.array_equal(z["output"], ref)
        assert np.array_equal(z["predictions"], ref.argmax(axis=1))
    rows = list(csv.reader(open(outs["csv"])))
    assert rows[0][0] == "prediction" and len(rows) == 1 + len(digits)
    assert [int(r[0]) for r in rows[1:]] == ref.argmax(axis=1).tolist()
    assert np.array_equal(np.array([[float(v) for v in r[1:]] for r in rows[1:]]), ref)
    doc = json.loads(outs["json"].read_text())
    assert np.array_equal(np.array(doc["output"]), ref)


def test_bad_output_suffix_is_refused_before_launch(tmp_path):
    t0 = time.monotonic()
    rc, so, se = run_cli("run", "-p", "reference", "-m", "bundled:digits-mlp", "--output", str(tmp_path / "y.txt"))
    assert rc == 2 and "unsupported suffix" in se
    assert "started" not in se and not (tmp_path / "y.txt").exists()
    assert time.monotonic() - t0 < 30


def test_help_lists_valid_values():
    run = build_parser()._subparsers._group_actions[0].choices["run"]
    fmt = run._get_formatter()   # (the HE parameter sets are filled in when help is shown)
    helps = {a.dest: fmt._get_help_string(a) for a in run._actions}
    for name in NAMED_CONFIGS:
        assert name in helps["fixed"]
    for name in PARAMETER_SETS:
        assert (name in helps["params"]) != ("insecure" in name), name
    for v in ("none", "lan", "wan", "bw=<MB/s>,lat=<ms>"):
        assert v in helps["network"]
    from secinfer.protocols.registry import names

    for p in names():
        assert p in helps["protocol"]


def test_version():
    from secinfer import __version__

    rc, so, se = run_cli("--version")
    assert rc == 0 and so.strip() == f"secinfer {__version__}"


def test_models_and_inspect_json():
    rc, so, se = run_cli("models", "--json")
    assert rc == 0, se
    cat = json.loads(so)
    protos = {p["name"]: p for p in cat["protocols"]}
    assert protos["crisp"]["roles"] == ["server", "client", "dealer"] and "dealer" in protos["crisp"]["trusted"]
    assert "DEMO CA" in protos["stamp"]["trusted"] and protos["reference"]["insecure"]
    assert {m["name"] for m in cat["bundled"]} == set(bundled.bundled_names())
    assert any(z["name"] == "secureml-a" for z in cat["zoo"])
    rc, so, se = run_cli("inspect", "bundled:cancer-logreg", "--json")
    assert rc == 0, se
    assert {p["protocol"] for p in json.loads(so)["protocols"]} >= {"astra", "stamp"}


def test_run_without_input_uses_bundled_test_set_and_says_so():
    rc, so, se = run_cli("run", "-p", "reference", "-m", "bundled:cancer-logreg", "--json")
    assert rc == 0, se
    X, _ = bundled.bundled_testset("cancer-logreg")
    assert "bundled held-out test set" in se and f"({len(X)} rows)" in se
    assert len(json.loads(so)["predictions"]) == len(X)


def test_zoo_runs_a_batch(tmp_path):
    rc, so, se = run_cli("run", "-p", "reference", "-m", "zoo:secureml-a", "--batch", "3", "--json")
    assert rc == 0, se
    assert np.asarray(json.loads(so)["output"]).shape == (3, 10)
    assert "seeded random input" in se
    x = np.linspace(0, 1, 2 * 784).reshape(2, 784)
    np.save(tmp_path / "x.npy", x)
    rc, so, se = run_cli("run", "-p", "reference", "-m", "zoo:secureml-a", "-i", str(tmp_path / "x.npy"), "--json")
    assert rc == 0, se
    assert np.asarray(json.loads(so)["output"]).shape == (2, 10)
    rc, so, se = run_cli("run", "-p", "reference", "-m", "zoo:secureml-a", "-i", str(tmp_path / "x.npy"),
                         "--batch", "3")
    assert rc == 2 and "batch 3 given but the input holds 2" in se
    rc, so, se = run_cli("run", "-p", "reference", "-m", "bundled:digits-mlp", "--batch", "3")
    assert rc == 2 and "zoo:" in se
