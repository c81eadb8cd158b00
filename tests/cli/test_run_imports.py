"""What `secinfer run` on issue #23's W1 (astra semi-honest, tcp, one query) imports
(issue #23 item 2): no process of the command (its run process, its parties, and so its
fork server, whose modules every party inherits) imports what that run does not need, so
that no such import creeps back onto the command's critical path."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.timeout(180)

# modules the W1 path must not import (heavy, or another protocol's, or another transport's)
HEAVY = ["onnx", "google.protobuf", "onnxruntime", "scipy", "sklearn", "matplotlib", "tqdm", "zmq", "torch",
         "secinfer.ir.onnx_import", "secinfer.crypto.he", "secinfer.crypto.fss", "secinfer.crypto.zk",
         "secinfer.net.zmq_transport", "secinfer.runtime.serve",
         *(f"secinfer.protocols.{p}" for p in ("aby3", "certified", "crisp", "falcon", "reference", "safhire",
                                              "stamp"))]

# the command as the user runs it, with a test-side patch: every forked child of its fork
# server (the run process, each party) writes what it imported when it ends
_WRAP = r"""
import json, os, sys
import secinfer.runtime.fork_child as fork_child
import secinfer.runtime.launcher_fork as launcher_fork

out = sys.argv.pop(1)
orig = fork_child.exit_child

def exit_child(code):
    try:
        with open("/proc/self/maps") as f:
            native = "libsecinferhe" in f.read()
        with open(os.path.join(out, f"{os.getpid()}.json"), "w") as f:
            json.dump({"modules": sorted(sys.modules), "native": native,
                       "party": "secinfer.runtime.party" in sys.modules and "--id" in str(sys.argv)}, f)
    except OSError:
        pass
    orig(code)

fork_child.exit_child = launcher_fork.exit_child = exit_child
from secinfer.cli.main import main
sys.exit(main())
"""


def test_w1_imports_nothing_heavy_in_any_process(tmp_path):
    from secinfer.bench.peers_suite import build_workload, workload_input

    model, x = tmp_path / "w1.onnx", tmp_path / "x.npy"
    model.write_bytes(build_workload("W1").SerializeToString())
    np.save(x, workload_input("W1", 1))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("SECINFER_TCP_NATIVE", None)
    line = ["run", "-p", "astra", "-s", "semi-honest", "-m", str(model), "-i", str(x), "--json"]
    # the first run imports the ONNX file (onnx is loaded then) and caches it; what is
    # checked is the run after it, as every later run of the same file goes
    first = subprocess.run([sys.executable, "-m", "secinfer", *line], capture_output=True, text=True,
                           timeout=120, env=env)
    assert first.returncode == 0, first.stderr
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    p = subprocess.run([sys.executable, "-c", _WRAP, str(dumps), *line], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)["startup"]
    assert st["start"] == "fork" and st["record_layer"] == "python (small run)"
    seen = [json.loads(f.read_text()) for f in dumps.iterdir()]
    assert len(seen) == 6, [sorted(s["modules"])[:3] for s in seen]   # the run process and five parties
    for s in seen:
        loaded = [m for m in s["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
        assert loaded == [], loaded
        assert not s["native"]                 # a small run: no Go runtime in any process
    assert "secinfer.protocols.astra" in seen[0]["modules"] and "numpy" in seen[0]["modules"]   # (it can see)
