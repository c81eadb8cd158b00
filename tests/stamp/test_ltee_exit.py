"""The LTEE device process ends with ``ltee_device.end`` (``os._exit``): after a shutdown,
or when its host closes the bus, it exits with status 0 without the interpreter's
finalization (its ~50-65 ms of CPU landed on the other parties' online phase;
docs/protocols/stamp.md, "Twelfth pass")."""

import os
import subprocess
import sys

import numpy as np
import pytest

from secinfer.protocols.stamp.ltee import LteeLink, LteeRefused

# a sitecustomize on the device's path: an atexit handler that writes a marker file -- it runs
# only if the interpreter finalizes (a plain return from ``main``), never after ``os._exit``
_HOOK = """
import atexit, os
_m = os.environ.get("SD_EXIT_MARK")
if _m:
    atexit.register(lambda: open(_m, "w").write("finalized"))
"""


@pytest.fixture
def marked(tmp_path, monkeypatch):
    (tmp_path / "sitecustomize.py").write_text(_HOOK)
    mark = tmp_path / "mark"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path)] + sys.path))
    monkeypatch.setenv("SD_EXIT_MARK", str(mark))
    return mark


def _hook_works(mark) -> None:
    """The hook itself: a plain interpreter with it on the path writes the marker."""
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert mark.read_text() == "finalized"
    mark.unlink()


def test_shutdown_exits_at_once_without_finalization(marked):
    _hook_works(marked)
    link = LteeLink("p0")
    link.ready()
    assert link.refresh_stats().shape == (5,)
    link.close()
    assert link._proc.returncode == 0
    assert not marked.exists()


def test_closed_bus_exits_without_finalization(marked):
    _hook_works(marked)
    link = LteeLink("p1")
    link.ready()
    link._proc.stdin.close()           # the host goes away without a shutdown: EOF on the bus
    assert link._proc.wait(timeout=60) == 0
    assert not marked.exists()
    with pytest.raises(LteeRefused) as e:
        link.call("stats")
    assert e.value.code == "dead"
    link.close()


def test_device_serves_before_its_end():
    """A refusal and an answer still come back in full before the process ends."""
    link = LteeLink("p2")
    try:
        with pytest.raises(LteeRefused) as e:
            link.call("mask", np.zeros(8, dtype=np.int64))
        assert e.value.code == "not-initialised"
        link.ready()
    finally:
        link.close()
    assert link._proc.returncode == 0


_GC_HOOK = """
import gc, os
_m = os.environ.get("SD_GC_MARK")
if _m:
    from secinfer.protocols.stamp import ltee_bus
    _send = ltee_bus.BusPipe.send
    def send(self, tag, arrays, seq, online=False):
        with open(_m, "a") as f:
            f.write("%d\\n" % gc.get_freeze_count())
        return _send(self, tag, arrays, seq, online)
    ltee_bus.BusPipe.send = send
"""


def test_the_device_freezes_its_collector_at_ready(tmp_path, monkeypatch):
    """``ready`` (before the online phase) moves the device process's start-up objects out of
    the collector's sight (``gc.freeze``): an online request never pays a full collection
    of the imported modules' objects (~40 ms measured)."""
    (tmp_path / "sitecustomize.py").write_text(_GC_HOOK)
    mark = tmp_path / "gc"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path)] + sys.path))
    monkeypatch.setenv("SD_GC_MARK", str(mark))
    link = LteeLink("p0")
    try:
        link.refresh_stats()
        link.ready()
        link.refresh_stats()
    finally:
        link.close()
    before, at_ready, after = (int(v) for v in mark.read_text().split())
    assert before == 0 and at_ready > 1000 and after > 1000
