"""Issue #22 item 7: options are validated before any party starts (the run is not lost
to a bad --output folder, --fixed or --params)."""

import os
import time

import numpy as np
import pytest

from cli_helpers import run_cli
from secinfer.ir import bundled


@pytest.mark.parametrize("extra, needle", [
    (["--output", "/nonexistent-secinfer-dir/y.npy"], "does not exist"),
    (["--fixed", "fx-bogus"], "unknown fixed-point config"),
    (["--params", "ckks-bogus"], "unknown HE parameter set"),
])
def test_bad_options_are_refused_before_any_party_starts(digits_input, extra, needle):
    t0 = time.monotonic()
    rc, _so, se = run_cli("run", "-p", "stamp", "-m", "bundled:digits-mlp", "-i", str(digits_input[0]), *extra)
    assert rc == 2 and needle in se, se
    assert "started" not in se and "party process" not in se, se
    assert time.monotonic() - t0 < 60


def test_a_party_refuses_a_missing_output_folder_before_connecting(tmp_path):
    from secinfer.runtime.cluster import write_loopback_cluster
    from secinfer.runtime.party import run_party_process

    X, _ = bundled.bundled_testset("digits-mlp")
    np.save(tmp_path / "x.npy", X[:1])
    cluster = write_loopback_cluster(tmp_path / "c", ("server", "client"), connect_timeout=30.0)
    t0 = time.monotonic()
    rec = run_party_process(cluster, "client", "reference", input_path=str(tmp_path / "x.npy"),
                            output_path=str(tmp_path / "missing" / "y.npy"))
    assert not rec["ok"] and "does not exist" in rec["error"]["message"]
    assert time.monotonic() - t0 < 10      # did not wait for the server to connect


def test_zoo_exports_are_cached_in_one_user_folder(tmp_path, monkeypatch):
    from secinfer.cli.resolve import model_path, zoo_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    a = model_path("zoo:lenet")
    b = model_path("zoo:lenet")
    assert a == b and a.startswith(str(zoo_cache_dir())) and a.endswith(".onnx")
    assert [p.name for p in zoo_cache_dir().iterdir()] == [os.path.basename(a)]
    assert list((tmp_path / "tmp").iterdir()) == []          # nothing per run in $TMPDIR
