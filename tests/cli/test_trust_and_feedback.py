"""Issue #21 items 9 (trust is visible) and 5 (feedback: bench list, step and row lines,
the results folder named at the start, -q/-v; cluster init for every protocol's roles)."""

import io
import json
import sys
import types

import numpy as np
import pytest

from secinfer.api import prepare, trust_of
from secinfer.bench import suites
from secinfer.bench.common import Progress, bench_feedback
from secinfer.cli.cluster_init import init_cluster, party_commands, role_hosts
from secinfer.cli.main import main
from secinfer.errors import ConfigError
from secinfer.ir import bundled
from secinfer.protocols import registry
from secinfer.runtime.cluster import load_cluster


# ---- item 9 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol,needles", [
    ("stamp", ("TRUSTED", "EMULATED", "DEMO CA")),
    ("crisp", ("TRUSTED", "dealer")),
    ("reference", ("INSECURE",)),
])
def test_trust_is_named_before_a_run(protocol, needles):
    X, _ = bundled.bundled_testset("digits-mlp")
    prep = prepare("bundled:digits-mlp", X[:1], protocol=protocol)
    try:
        notes = "\n".join(prep.notes)
        for n in needles:
            assert n in notes
    finally:
        prep.model.cleanup()


def test_trust_is_spec_metadata_and_in_json():
    assert "dealer" in registry.get("crisp").trust
    assert "DEMO CA" in registry.get("stamp").trust
    assert trust_of(registry.get("astra")) == {"insecure": False, "trusted": None}
    from secinfer import run

    X, _ = bundled.bundled_testset("digits-mlp")
    res = run("bundled:digits-mlp", X[:1], protocol="reference", in_process=True, quiet=True)
    assert res.to_json()["trust"] == {"insecure": True, "trusted": None}


def test_party_names_the_trusted_dealer(tmp_path, capsys):
    path = init_cluster("crisp", out=tmp_path / "c", port="auto")
    # the notice comes before the party connects: a missing model file fails afterwards
    rc = main(["party", "--cluster", str(path), "--id", "dealer", "--protocol", "crisp",
               "--model", str(tmp_path / "missing.onnx")])
    assert rc == 2
    assert "TRUSTED" in capsys.readouterr().err


# ---- item 7: cluster files for every protocol's roles ---------------------------------------------
@pytest.mark.parametrize("protocol", registry.names())
def test_cluster_init_writes_every_role(protocol, tmp_path):
    spec = registry.get(protocol)
    hosts = ",".join(f"10.0.0.{k + 1}" for k in range(len(spec.roles)))
    path = init_cluster(protocol, hosts=hosts, out=tmp_path / "c", port=7000)
    c = load_cluster(path)
    c.check_roles(spec.roles)
    assert [(p.role, p.host, p.port) for p in c.parties.values()] == \
        [(r, f"10.0.0.{k + 1}", 7000 + k) for k, r in enumerate(spec.roles)]
    for r in spec.roles:
        assert (tmp_path / "c" / "keys" / f"{r}.key_secret").stat().st_mode & 0o077 == 0
    cmds = dict(party_commands(protocol, path, "abc"))
    assert "--model" in cmds[spec.model_role] and "--input" in cmds[spec.input_role]


def test_cluster_init_with_public_keys_only(tmp_path):
    from secinfer.crypto.identity import keygen

    keygen(tmp_path / "pub", ["p0", "p1", "p2"])
    for f in (tmp_path / "pub").glob("*.key_secret"):
        f.unlink()                                  # the secrets stay on their hosts
    path = init_cluster("stamp", hosts="a.example,b.example,c.example", out=tmp_path / "c",
                        public_keys=str(tmp_path / "pub"))
    assert not (tmp_path / "c" / "keys").exists()
    assert [p.host for p in load_cluster(path).parties.values()] == ["a.example", "b.example", "c.example"]
    with pytest.raises(ConfigError, match="no .*p1.key"):
        (tmp_path / "pub" / "p1.key").unlink()
        init_cluster("stamp", out=tmp_path / "d", public_keys=str(tmp_path / "pub"))


@pytest.mark.parametrize("hosts,needle", [
    ("h1,h2", "2 hosts for 3 roles"),
    ("p0=h1,p1=h2", "no host for role"),
    ("p0=h1,p1=h2,p9=h3", "not a role"),
    ("p0=h1,h2,h3", "not both"),
])
def test_cluster_init_bad_hosts(hosts, needle):
    with pytest.raises(ConfigError, match=needle):
        role_hosts(["p0", "p1", "p2"], hosts)


def test_cluster_init_refuses_to_overwrite(tmp_path):
    init_cluster("reference", out=tmp_path, port="auto")
    with pytest.raises(ConfigError, match="--force"):
        init_cluster("reference", out=tmp_path, port="auto")


# ---- item 5 -----------------------------------------------------------------------------------------
def test_bench_list_names_tables_and_measured_times(capsys):
    assert main(["bench", "list"]) == 0
    out = capsys.readouterr().out
    for name in suites.SUITES:
        assert name in out
        assert name in suites.SUITE_INFO
        info = suites.SUITE_INFO[name]
        assert info["reproduces"]
        # a figure only with where it was measured
        assert (info["quick_s"] is None and info["full_s"] is None) or info["source"]
    assert "STAMP Tables 1, 2, 3, 4" in out and "not measured" in out


def test_progress_prints_start_done_rows_and_still_running():
    buf = io.StringIO()
    with bench_feedback(0):
        p = Progress("x", 2, stream=buf, tick=0.05)
        p("step one")
        import time

        time.sleep(0.2)
        p.row("row of step one")
        p("step two")
    text = buf.getvalue()
    assert "[bench x 1/2" in text and "step one ..." in text and "still running: step one" in text
    assert "done: step one" in text and "row of step one" in text and "done: step two" in text
    quiet = io.StringIO()
    with bench_feedback(-1):
        q = Progress("x", 1, stream=quiet, tick=0.01)
        q("silent")
    assert quiet.getvalue() == ""


def test_run_one_names_the_folder_first_and_echoes_rows(tmp_path, monkeypatch, capsys):
    mod = types.ModuleType("secinfer_test_fake_suite")
    seen = {}

    def run(quick=False, network=None):
        seen["stderr_before"] = capsys.readouterr().err    # what the user saw before any work
        prog = Progress("fake", 1)
        prog("only step")
        return {"rows": [{"a": 1.5}], "plots": []}
    mod.run = run
    monkeypatch.setitem(sys.modules, "secinfer_test_fake_suite", mod)
    monkeypatch.setitem(suites.SUITES, "fake", ("secinfer_test_fake_suite", "run"))
    assert suites.run_suite("fake", out=str(tmp_path), quick=True) == 0
    assert "results folder: " + str(tmp_path) in seen["stderr_before"]
    cap = capsys.readouterr()
    assert "a=1.5" in cap.out and "done: only step" in cap.err
    folder = next(tmp_path.iterdir())
    assert json.loads((folder / "results.json").read_text())["rows"] == [{"a": 1.5}]
    assert suites.run_suite("fake", out=str(tmp_path), quick=True, verbosity=-1) == 0
    cap = capsys.readouterr()
    assert "a=1.5" not in cap.out and "only step" not in cap.err


def test_run_verbose_prints_phases(capsys):
    X, _ = bundled.bundled_testset("digits-mlp")
    from secinfer import run
    from secinfer.cli.feedback import run_details

    res = run("bundled:digits-mlp", X[:1], protocol="reference", in_process=True, quiet=True)
    text = run_details(res)
    assert "offline" in text and "online" in text and "rounds" in text


def test_party_output_must_be_npy(tmp_path, capsys):
    path = init_cluster("reference", out=tmp_path / "c", port="auto")
    rc = main(["party", "--cluster", str(path), "--id", "client", "--protocol", "reference",
               "--input", "x.npy", "--output", str(tmp_path / "y.csv")])
    assert rc == 2 and "name it *.npy" in capsys.readouterr().err
