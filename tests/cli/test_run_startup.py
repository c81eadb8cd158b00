"""`secinfer run` starts its fork server before parsing its command line (issue #23 item 2):
the run line is read for -p/--transport first; argparse confirms; usage errors read as
before."""

import types

import pytest

from cli_helpers import run_cli
from secinfer.cli import commands
from secinfer.cli.main import _scan_run, main

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("argv, want", [
    (["run", "-p", "astra", "-m", "m.onnx"], ("astra", None)),
    (["--debug", "run", "--protocol=aby3", "--transport", "zmq"], ("aby3", "zmq")),
    (["run", "-pstamp", "--transport=tcp"], ("stamp", "tcp")),
    (["run", "-m", "x.onnx", "-p", "falcon", "-p", "astra"], ("astra", None)),   # argparse: the last one
    (["run", "-p", "astra", "--help"], None),
    (["run", "-h"], None),
    (["run", "-m", "x.onnx"], None),
    (["run", "-p"], None),
    (["run", "-p", "--json"], None),
    (["models", "-p", "astra"], None),
    ([], None),
])
def test_scan_run(argv, want):
    assert _scan_run(argv) == want


def test_a_server_for_another_protocol_is_stopped_and_replaced(monkeypatch, tmp_path):
    closed, started = [], []
    early = types.SimpleNamespace(matches=lambda p, m, t: (p, m, t) == ("astra", None, None),
                                  close=lambda: closed.append(True))

    class Fake:   # what cmd_run starts instead (no process needed to see the decision)
        @staticmethod
        def start(protocol, **kw):
            started.append((protocol, kw.get("transport")))
            return types.SimpleNamespace(close=lambda: None)

    import secinfer.runtime.launcher_fork as lf

    monkeypatch.setattr(lf, "ForkServer", Fake)
    used = []
    monkeypatch.setattr(commands, "_cmd_run", lambda args, server, events: used.append(server) or 0)
    args = types.SimpleNamespace(protocol="reference", transport=None)
    assert commands.cmd_run(args, server=early) == 0
    assert closed == [True] and started == [("reference", None)] and used[0] is not early
    closed.clear(), started.clear(), used.clear()
    args = types.SimpleNamespace(protocol="astra", transport=None)
    assert commands.cmd_run(args, server=early) == 0
    assert started == [] and used == [early]          # the early server is the one used


def test_usage_errors_are_told_once_by_the_whole_parser():
    rc, out, err = run_cli("run", "-p", "reference", "-m", "bundled:digits-mlp", "--bogus")
    assert rc == 2
    assert err.count("unrecognized arguments: --bogus") == 1
    assert "{demo,run,party" in err
    rc, out, err = run_cli("run", "-p", "reference", "-m", "bundled:digits-mlp", "--output-kind", "x")
    assert rc == 2 and err.count("invalid choice: 'x'") == 1 and "secinfer run: error" in err


def test_run_help_and_a_refused_model_leave_no_server(tmp_path):
    rc, out, err = run_cli("run", "--help")
    assert rc == 0 and "--no-model-cache" in out
    rc, out, err = run_cli("run", "-p", "astra", "-m", str(tmp_path / "missing.onnx"))
    assert rc == 2 and "does not exist" in err


def test_main_closes_the_early_server_on_a_usage_error(monkeypatch):
    import secinfer.runtime.launcher_fork as lf

    made = []

    class Fake:
        @staticmethod
        def start(protocol, **kw):
            s = types.SimpleNamespace(closed=False)
            s.close = lambda: setattr(s, "closed", True)
            made.append(s)
            return s

    monkeypatch.setattr(lf, "ForkServer", Fake)
    with pytest.raises(SystemExit):
        main(["run", "-p", "astra", "-m", "x.onnx", "--bogus"])
    assert len(made) == 1 and made[0].closed
