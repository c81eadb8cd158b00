"""The LTEE's ``ready`` command returns only once its start-up work (the kernels' import
thread) is done, so the host can keep that work out of its online phase."""

import threading
import time

import numpy as np
import pytest

from secinfer.protocols.stamp import ltee_device
from secinfer.protocols.stamp.ltee import LteeLink
from secinfer.protocols.stamp.ltee_counters import Refused


def test_ready_waits_for_the_start_up_thread():
    dev = ltee_device.Device()
    done = threading.Event()

    def work():
        time.sleep(0.2)
        done.set()
    dev.preload = threading.Thread(target=work)
    dev.preload.start()
    assert dev.cmd_ready([]) == []
    assert done.is_set() and dev.preload is None
    assert dev.cmd_ready([]) == []                 # again: a no-op
    assert dev.cmd_ready([np.array([250], dtype=np.int64)]) == [] and dev.spin_s == 250e-6
    for bad in ([np.zeros(3)], [np.array([-1], dtype=np.int64)], [np.array([10 ** 9], dtype=np.int64)],
                [np.array([5], dtype=np.int32)], [np.array([5], dtype=np.int64)] * 2):
        with pytest.raises(Refused):   # a malformed busy-poll budget is refused
            dev.cmd_ready(bad)
    assert dev.spin_s == 250e-6


def test_ready_over_the_bus_changes_no_counter():
    link = LteeLink("p0")
    try:
        before = link.refresh_stats().copy()
        link.ready()
        assert link.meter.by_kind["ready"][2] == 1
        after = link.refresh_stats()
        assert np.array_equal(before[:4], after[:4])   # no device operation, no AES output
    finally:
        link.close()

