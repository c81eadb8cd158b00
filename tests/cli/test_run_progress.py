"""Issue #21 item 5: `secinfer run` on a terminal shows every party's stage and phase live;
with --json (or not on a terminal) nothing but the notices."""

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
import types

import numpy as np

from secinfer.net.meter import Meter
from secinfer.runtime.progress import PartyStatus, describe, read_status


def _on_terminal(*args, timeout=120) -> tuple[int, str]:
    m, s = pty.openpty()
    fcntl.ioctl(s, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 220, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "secinfer", *args], stdout=subprocess.DEVNULL, stderr=s,
                         stdin=subprocess.DEVNULL)
    os.close(s)
    buf, t_end = b"", time.monotonic() + timeout
    while time.monotonic() < t_end:
        r, _, _ = select.select([m], [], [], 0.2)
        if r:
            try:
                d = os.read(m, 65536)
            except OSError:
                break
            if not d:
                break
            buf += d
        elif p.poll() is not None:
            break
    p.kill()
    os.close(m)
    return p.wait(), buf.decode(errors="replace").replace("\r", "\n")


def test_run_on_a_terminal_shows_party_stages_and_phases():
    rc, err = _on_terminal("run", "-p", "reference", "-m", "bundled:digits-mlp", "--network", "wan")
    assert rc == 0, err
    assert "[secinfer] reference: started 2 party processes" in err, err
    assert "[secinfer] reference: done in" in err, err
    # the bar is drawn when it starts and redrawn, with every party's stage from its status
    # file, each time a party exits (besides the refreshes every 0.5 s): so, however short
    # the run, both parties' stages are shown, and the first party to exit as done
    assert "parties finished" in err, err
    assert "server: " in err and "client: " in err, err
    assert "server: done" in err or "client: done" in err, err
    assert "FAILED" not in err, err


def test_run_json_on_a_terminal_shows_no_bar():
    rc, err = _on_terminal("run", "-p", "reference", "-m", "bundled:digits-mlp", "--json")
    assert rc == 0, err
    assert "parties finished" not in err and "client: " not in err


def test_party_status_file(tmp_path):
    path = tmp_path / "p.json"
    st = PartyStatus(path, interval=60)
    assert read_status(path) is None or read_status(path)["stage"] == "load"
    st.set_stage("connect")
    assert read_status(path)["stage"] == "connect"
    meter = Meter("client")
    meter.depth["online"] = 7
    meter.counters[("online", "sent", "server", "x")].add(250_000, 250_100)
    meter.marks.append(("query", 1.0))
    ep = types.SimpleNamespace(meter=meter, current_phase="online")
    st.set_stage("protocol", ep)
    got = read_status(path)
    assert got["phase"] == "online" and got["rounds"] == 7 and got["sent"] == 250_000 and got["mark"] == "query"
    assert describe({"client": got, "server": None}) == "client: online r7 0.2MB [query] | server: starting"
    st.stop()
    assert read_status(path)["stage"] == "done"
