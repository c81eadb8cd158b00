"""Issue #22 item 6: every party's structured log (timestamp, role, phase, step, bytes),
kept after a failure and named in the error, written line by line (a SIGKILLed party
leaves what it wrote), --log-dir, per-phase timing in the result JSON; the launcher's
work folder (input, keys) is removed on any exit, also when the launcher gets SIGTERM,
and left-overs of a SIGKILLed launcher are removed by the next run."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from proc_helpers import alive, descendants_of
from secinfer.runtime.launcher import PartyFailedError, run_local

pytestmark = pytest.mark.timeout(120)
MOD = "rt_ring_protocol"  # tests/runtime/rt_ring_protocol.py
PROTO = "test-ring"
X = np.array([[0.5, -1.0, 2.0]])


@pytest.fixture
def tmpdir_only_ours(tmp_path, monkeypatch):
    """The launcher's temporary folders go to a folder of this test alone."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_success_leaves_nothing_behind_and_reports_per_party_timing(tmpdir_only_ours):
    res = run_local(PROTO, input_array=X, options={"rounds": 3}, protocol_module=MOD, timeout=60)
    assert list(tmpdir_only_ours.iterdir()) == []
    timing = res.to_json()["timing"]
    assert set(timing) == {"server", "client", "helper"}
    for t in timing.values():
        assert {"load", "connect", "setup", "offline", "online", "protocol", "close", "total"} <= set(t)


def test_log_dir_keeps_structured_logs_of_every_party(tmpdir_only_ours, tmp_path):
    logs = tmp_path / "logs"
    res = run_local(PROTO, input_array=X, options={"rounds": 3}, protocol_module=MOD, timeout=60, log_dir=logs)
    assert res.log_dir == str(logs) and (logs.stat().st_mode & 0o777) == 0o700
    for role in ("server", "client", "helper"):
        recs = _lines(logs / f"party-{role}.log.jsonl")
        events = [r["event"] for r in recs]
        assert events[0] == "start" and "connected" in events and "done" in events and events[-1] == "closed"
        assert all(r["role"] == role for r in recs[1:]) and all(r["ts"].endswith("+00:00") for r in recs)
        done = next(r for r in recs if r["event"] == "done")
        assert done["phases"]["online"]["rounds"] >= 1 and done["phases"]["offline"]["seconds"] >= 0
        assert (logs / f"party-{role}.log.jsonl").stat().st_mode & 0o777 == 0o600
        assert (logs / f"party-{role}.stderr.log").stat().st_mode & 0o777 == 0o600
    assert list(tmpdir_only_ours.iterdir()) == []   # the work folder is gone


def test_a_failure_keeps_the_logs_names_them_and_a_killed_party_leaves_its_lines(tmpdir_only_ours):
    with pytest.raises(PartyFailedError, match=r"party logs: ") as ei:
        run_local(PROTO, input_array=X, options={"rounds": 30, "die": "server", "at_round": 2},
                  protocol_module=MOD, timeout=60)
    logdir = Path(ei.value.log_dir)
    assert logdir.is_dir() and str(logdir) in str(ei.value)
    killed = _lines(logdir / "party-server.log.jsonl")       # SIGKILLed mid-protocol
    assert [r["event"] for r in killed][:3] == ["start", "loaded", "connected"]
    helper = _lines(logdir / "party-helper.log.jsonl")
    err = next(r for r in helper if r["event"] == "error")
    assert err["type"] == "PeerDeadError" and "server" in err["message"] and err["phase"] == "online"
    assert err["step"]                                        # the last message before the failure
    # only the logs are kept: the work folder (keys, input) is gone
    assert [p.name for p in tmpdir_only_ours.iterdir()] == [logdir.name]


@pytest.mark.parametrize("start, n", [("auto", 4), ("spawn", 3)])   # auto: the fork server and 3 parties
def test_sigterm_to_the_launcher_stops_the_parties_and_removes_the_work_folder(tmp_path, start, n):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # two rounds: every party waits until the launcher ends it (with one, the server party
    # could finish before the last party started under load: 3 of 4 alive, 3 in 3 runs)
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
              "import numpy as np\nfrom secinfer.runtime.launcher import run_local\n"
              f"run_local({PROTO!r}, input_array=np.ones(3), options={{'stall': 'helper', 'rounds': 2}}, "
              f"protocol_module={MOD!r}, timeout=120, start={start!r})\n")
    env = dict(os.environ, TMPDIR=str(tmp))
    launcher = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True,
                                stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        kids = []
        while time.monotonic() < deadline and len(kids) < n:
            time.sleep(0.1)
            kids = alive(descendants_of(launcher.pid))
        assert len(kids) == n, (kids, [Path(f"/proc/{k}/cmdline").read_bytes()[:200] for k in alive(kids)],
                                launcher.poll())
        work = [p for p in tmp.iterdir() if p.name.startswith("secinfer-run-")]
        assert len(work) == 1 and (work[0].stat().st_mode & 0o777) == 0o700
        time.sleep(1.0)
        os.kill(launcher.pid, signal.SIGTERM)
        launcher.wait(20)
        assert b"LauncherInterrupted" in launcher.stderr.read()
        assert not work[0].exists()
        deadline = time.monotonic() + 10     # (a forked party is reaped by the fork server as it goes)
        while alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(kids) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_the_work_folder_of_a_sigkilled_launcher_is_removed_by_the_next_run(tmpdir_only_ours):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmpdir_only_ours / "secinfer-run-stale"
    stale.mkdir()
    (stale / "launcher.pid").write_text(str(dead.pid))
    (stale / "p0.key").write_text("secret")
    run_local(PROTO, input_array=X, options={"rounds": 1}, protocol_module=MOD, timeout=60)
    assert not stale.exists()
