"""`secinfer run` runs in a process forked from its fork server (secinfer.cli.runner, issue
#23 item 2): the command process imports neither numpy nor the API (nor json, socket or
subprocess: it only waits), its exit code, output and signals are the run process's, and
nothing outlives it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from proc_helpers import alive, descendants_of

pytestmark = pytest.mark.timeout(180)

# a run that lasts seconds: every message of the reference protocol 2 s late
SLOW = ["run", "-p", "reference", "-m", "bundled:diabetes-linreg", "--network", "bw=1,lat=2000"]


@pytest.fixture
def w1(tmp_path):
    from secinfer.bench.peers_suite import build_workload, workload_input

    (tmp_path / "w1.onnx").write_bytes(build_workload("W1").SerializeToString())
    np.save(tmp_path / "x.npy", workload_input("W1", 1))
    return str(tmp_path / "w1.onnx"), str(tmp_path / "x.npy")


def test_the_command_imports_no_numpy_and_the_run_process_checks_and_launches(w1):
    code = ("import sys\nfrom secinfer.cli.main import main\nrc = main(sys.argv[1:])\nmods = set(sys.modules)\n"
            "import json\nprint(json.dumps({'rc': rc, 'numpy': 'numpy' in mods, 'api': 'secinfer.api' in mods, "
            "'waiting': sorted(m for m in ('json', 'socket', 'subprocess', 'secinfer.runtime.launcher_fork') "
            "if m in mods)}), file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", code, "run", "-p", "astra", "-s", "semi-honest", "-m", w1[0],
                        "-i", w1[1], "--json"], capture_output=True, text=True, timeout=120)
    status = json.loads(p.stderr.strip().splitlines()[-1])
    # (nor what it would need to talk JSON to its server: the server forks the run process unasked)
    assert status == {"rc": 0, "numpy": False, "api": False, "waiting": []}, p.stderr
    doc = json.loads(p.stdout)
    st = doc["startup"]
    assert st["start"] == "fork" and st["fallback"] is None
    # a one-query dot product is a small run: its parties skip loading the native record layer
    assert st["record_layer"] == ("python (small run)" if "SECINFER_TCP_NATIVE" not in os.environ else None)
    ev = st["events"]
    # the server is forked before the line is parsed, the run process once the server has
    # imported the protocol; the line is parsed and checked there, then the parties start
    assert ev["fork_server_spawned"] <= ev["run_process"] <= ev["run_command"] <= ev["prepared"] \
        <= ev["parties_started"]
    assert "fork server's imports, then it forks the run process" in st["steps"]
    from secinfer.api import run as api_run   # (same answer in process: bit for bit)
    ref = api_run(w1[0], np.load(w1[1]), protocol="astra", security="semi-honest", in_process=True)
    assert np.array_equal(np.asarray(doc["output"]), ref.output)


def test_exit_code_stdout_and_stderr_are_the_run_processs(tmp_path):
    p = subprocess.run([sys.executable, "-m", "secinfer", "run", "-p", "reference", "-m",
                        str(tmp_path / "missing.onnx")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("error:")] == \
        [ln for ln in p.stderr.splitlines()] and "does not exist" in p.stderr


def _start_slow(tmp_path, *extra):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "secinfer", *SLOW, *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, TMPDIR=str(tmp)), start_new_session=True)
    deadline, kids = time.monotonic() + 90, []
    # server, run process, 2 parties (the server forks 2 spares at once, before the run
    # process's checks: they are the parties once their logs exist)
    while time.monotonic() < deadline and (len(kids) < 4 or len(list(tmp.glob("secinfer-logs-*/party-*.log"))) < 2):
        time.sleep(0.1)
        kids = alive(descendants_of(proc.pid))
    assert len(kids) == 4, (kids, proc.poll())
    work = [p for p in tmp.iterdir() if p.name.startswith("secinfer-run-")]
    assert len(work) == 1
    return proc, kids, work[0]


@pytest.mark.parametrize("sig, rc, said", [(signal.SIGINT, 130, "error: interrupted"),
                                           (signal.SIGTERM, 2, "stopped by SIGTERM")])
def test_a_signal_to_the_command_reaches_the_run_process_which_cleans_up(tmp_path, sig, rc, said):
    proc, kids, work = _start_slow(tmp_path)
    try:
        time.sleep(0.5)
        os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == rc, err
        assert said in err.decode(), err
        assert not work.exists()
        deadline = time.monotonic() + 10
        while alive(kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(kids) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_killed_command_takes_its_server_run_process_and_parties_along(tmp_path):
    proc, kids, _ = _start_slow(tmp_path)
    # command -> fork server -> {run process, party, party}: no party is the run process's child
    servers = [k for k in kids if _ppid(k) == proc.pid]
    assert len(servers) == 1 and all(_ppid(k) == servers[0] for k in kids if k != servers[0])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 15
    while alive(kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive(kids) == []


def test_relative_paths_are_read_from_the_commands_folder(w1, tmp_path):
    folder = Path(w1[0]).parent
    p = subprocess.run([sys.executable, "-m", "secinfer", "run", "-p", "astra", "-s", "semi-honest", "-m", "w1.onnx",
                        "-i", "x.npy", "--output", "y.npy", "-q"], capture_output=True, text=True, timeout=120,
                       cwd=folder, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert p.returncode == 0, p.stderr
    assert (folder / "y.npy").is_file()


def test_a_server_forks_a_run_process_only_with_the_three_descriptors(w1, capfd):
    """The server's side of ``run`` (here a spawned server: this test process is not fresh)."""
    from secinfer.cli.runner import TARGET, run_via_server
    from secinfer.runtime.launcher_fork import ForkServer, _send

    server = ForkServer.start("astra", onnx=False)
    try:
        assert server is not None and server.wait_ready(60) is None
        _send(server.sock, {"op": "run", "target": TARGET, "argv": []})      # no descriptors: refused
        end = time.monotonic() + 10
        while "run" not in server._pending and time.monotonic() < end:
            server.pump(0.5)
        assert server._pending.pop("run")["op"] == "error"
        argv = ["run", "-p", "astra", "-s", "semi-honest", "-m", w1[0], "-i", w1[1], "--json"]
        rc = run_via_server(server, argv, time.time(), time.time())
        assert rc == 0
    finally:
        server.close()
    doc = json.loads(capfd.readouterr().out)
    assert doc["startup"]["start"] == "fork" and "run_process" in doc["startup"]["events"]
    from secinfer.api import run as api_run

    ref = api_run(w1[0], np.load(w1[1]), protocol="astra", security="semi-honest", in_process=True)
    assert np.array_equal(np.asarray(doc["output"]), ref.output)


def test_a_run_whose_server_is_gone_is_run_by_the_command(w1, monkeypatch):
    """start_run on a dead server: None, nothing ran (main then runs the line itself)."""
    from secinfer.cli.runner import TARGET
    from secinfer.runtime.launcher_fork import ForkServer

    server = ForkServer.start("astra", onnx=False)
    assert server is not None and server.wait_ready(60) is None
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)
    assert server.start_run(TARGET, {"argv": []}, timeout=10) is None
    server.close()


@pytest.mark.parametrize("lines, rc", [(b"error forking is unsafe here\n", None), (b"", None),
                                       (b"started 4242\nexited 4242 3\n", 3),
                                       (b"started 4242\nexited 4242 -9\n", 137), (b"started 4242\n", 2)])
def test_the_waiting_command_reads_its_servers_plain_lines(lines, rc, capfd):
    """``wait_run``: the run process's exit code; None (the command runs the line itself)
    when it was never started; the server is reaped either way."""
    import socket

    from secinfer.cli.runner import wait_run

    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:      # a stand-in for the server: says its lines, then ends
        try:
            a.close()
            b.sendall(lines)
        finally:
            os._exit(0)
    b.close()
    assert wait_run(pid, a.detach()) == rc
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)                  # reaped
    err = capfd.readouterr().err
    assert ("killed by signal SIGKILL" in err) == (rc == 137)
    assert ("died with its fork server" in err) == (rc == 2)
