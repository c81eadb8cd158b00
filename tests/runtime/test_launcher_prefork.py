"""The fork server's spares (secinfer.runtime.launcher_prefork, issue #23 item 2): one
process per role forked ahead, before the run process's checks, each becoming a party only
when asked; a failed check leaves none behind."""

import json
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(180)

# (in a fresh interpreter: a spare's end runs the process's exit handlers, not pytest's)
_SPARES = r"""
import json, os, sys
from secinfer.runtime.launcher_prefork import Spares

out = sys.argv[1]

def become(req, fds):
    with open(out, "w") as f:
        json.dump(req, f)
    os._exit(7)

sp = Spares()
pids = sp.fork(3, 11, [], become)
first = sp.take(11, {"op": "fork", "role": "p0", "argv": ["x" * 100000]})   # (larger than a pipe's buffer)
_, st = os.waitpid(first, 0)
took = os.waitstatus_to_exitcode(st)
with open(out) as f:
    got = json.load(f)
left = sp.count(11)
others = [p for p in pids if p != first]
sp.drop(11)                        # the rest read the end of their pipe and exit quietly
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in others]
print(json.dumps({"n": len(pids), "first_is_a_spare": first in pids, "rc": took, "role": got["role"],
                  "argv_len": len(got["argv"][0]), "left": left, "others": codes,
                  "none_left": sp.take(11, {"op": "fork"}) is None, "fds": sp.fds()}))
"""


def test_a_spare_becomes_what_it_is_asked_and_the_others_end_with_their_pipe(tmp_path):
    p = subprocess.run([sys.executable, "-c", _SPARES, str(tmp_path / "req.json")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got == {"n": 3, "first_is_a_spare": True, "rc": 7, "role": "p0", "argv_len": 100000, "left": 2,
                   "others": [0, 0], "none_left": True, "fds": []}


@pytest.fixture
def w1(tmp_path):
    from secinfer.bench.peers_suite import build_workload, workload_input

    (tmp_path / "w1.onnx").write_bytes(build_workload("W1").SerializeToString())
    np.save(tmp_path / "x.npy", workload_input("W1", 1))
    return str(tmp_path / "w1.onnx"), str(tmp_path / "x.npy")


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``mark`` (every process of one command
    inherits the command's environment: its fork server, run process, spares, parties)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if mark.encode() in f.read():
                    with open(f"/proc/{d}/stat") as s:
                        if s.read().rsplit(")", 1)[1].split()[0] != "Z":
                            found.append(int(d))
        except OSError:
            continue
    return found


def _run(args, mark, **kw):
    env = dict(os.environ, SECINFER_TEST_MARK=mark)
    return subprocess.run([sys.executable, "-m", "secinfer", "run", *args], capture_output=True, text=True,
                          timeout=120, env=env, **kw)


def _none_left(mark: str, wait: float = 10.0) -> list[int]:
    deadline = time.monotonic() + wait
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _marked(mark)


def test_the_parties_of_a_run_are_its_spares_and_none_outlives_it(w1):
    mark = f"prefork-{uuid.uuid4().hex}"
    p = _run(["-p", "astra", "-s", "semi-honest", "-m", w1[0], "-i", w1[1], "--json"], mark)
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)["startup"]
    assert st["start"] == "fork" and st["preforked"] == 5          # every party was a spare
    assert _none_left(mark) == []


@pytest.mark.parametrize("bad", ["shape", "nan"])
def test_a_failed_check_stops_the_spares_with_a_clear_error(w1, tmp_path, bad):
    """The spares are forked while the run process checks; a check that fails ends the run
    with its own error, and no spare (nor any other process of the command) is left."""
    x = np.full((1, 5), 1.0) if bad == "shape" else np.full((1, 784), np.nan)
    np.save(tmp_path / "bad.npy", x)
    mark = f"prefork-{uuid.uuid4().hex}"
    p = _run(["-p", "astra", "-s", "semi-honest", "-m", w1[0], "-i", str(tmp_path / "bad.npy")], mark)
    assert p.returncode == 2
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, p.stderr
    assert ("784" in errors[0] or "shape" in errors[0]) if bad == "shape" else ("nan" in errors[0].lower())
    assert _none_left(mark) == []
