"""(d) An abort leaves no output and no live process: real OS processes (the launcher).

One protocol per family, run by ``secinfer.runtime.launcher.run_local`` with one party
made faulty from the test side (conformance/faults.py): the replicated three-party family
(astra: a tampered message caught by a malicious-security check; stamp: a party with its
trusted-device process SIGKILLed mid-protocol) and the two-party HE/FSS family (crisp:
the client SIGKILLed). Afterwards every party process and every process of its group
(the trusted devices) is gone, and no output file was written; the same harness without
a fault writes one (the control).
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import pytest

from proc_helpers import processes_in_groups
from secinfer.errors import ProtocolAbort, SecinferError
from secinfer.ir import bundled
from secinfer.protocols import registry
from secinfer.runtime.launcher import PartyFailedError, run_local

pytestmark = [pytest.mark.timeout(120)]

ASTRA, STAMP, CRISP = "cancer-logreg", "cancer-linsvc", "digits-mlp"


def _launch(tmp_path, monkeypatch, protocol, model, security, rows, fault=None):
    """run_local of ``fault-<protocol>``; returns (result or error, the run's work folder)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the launcher's work folder goes here
    # run_local registers fault-<protocol> in this process too: undo it after the test
    monkeypatch.setattr(registry, "_MODULES", dict(registry._MODULES))
    X, _ = bundled.bundled_testset(model)
    options = {"fault": fault} if fault else {}
    try:
        out = run_local(f"fault-{protocol}", security, str(bundled.bundled_path(model)), X[:rows],
                        options=options, timeout=90, protocol_module=f"conformance.fault_{protocol}",
                        keep_workdir=True, cluster_settings={"peer_timeout": 2.0})
    except SecinferError as e:
        out = e
    (work,) = tmp_path.glob("secinfer-run-*")
    return out, work


def _assert_gone_and_no_output(err, work):
    pids = set(err.pids.values())
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # a device process SIGKILLed with its group by the launcher may still be on its way out
    deadline = time.monotonic() + 3.0
    while processes_in_groups(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_in_groups(pids) == [], "a party's process (or its device) outlived the run"
    assert list(work.glob("output*.npy")) == [], "an output file was written"


def test_control_without_fault_writes_the_output(tmp_path, monkeypatch):
    res, work = _launch(tmp_path, monkeypatch, "astra", ASTRA, "malicious", 3)
    assert not isinstance(res, BaseException), res
    assert res.output is not None and np.shape(res.output)[0] == 3
    assert (work / "output.npy").is_file()
    assert res.bytes_by_phase["offline"] > 0 and res.bytes_by_phase["online"] > 0 and res.rounds["online"] >= 1


def test_astra_tampered_message_aborts_everyone(tmp_path, monkeypatch):
    # p1's first online message carries an error: a malicious-security check fires
    err, work = _launch(tmp_path, monkeypatch, "astra", ASTRA, "malicious", 3,
                        fault={"role": "p1", "kind": "tamper", "phase": "online", "at_send": 0})
    assert isinstance(err, ProtocolAbort), repr(err)
    assert err.check != "peer-abort", err
    _assert_gone_and_no_output(err, work)
    # the others stop because of it: an announced abort, or the aborting party gone
    assert {f["type"] for f in err.party_errors.values()} <= {"ProtocolAbort", "PeerAbortedError",
                                                             "PeerDeadError", "Terminated"}


def test_stamp_party_killed_stops_everyone(tmp_path, monkeypatch):
    err, work = _launch(tmp_path, monkeypatch, "stamp", STAMP, "malicious", 3,
                        fault={"role": "p0", "kind": "die", "at_send": 4})
    assert isinstance(err, PartyFailedError) and err.party == "p0", repr(err)
    assert "SIGKILL" in str(err)
    _assert_gone_and_no_output(err, work)


def test_crisp_client_killed_stops_everyone(tmp_path, monkeypatch):
    err, work = _launch(tmp_path, monkeypatch, "crisp", CRISP, "malicious", 2,
                        fault={"role": "client", "kind": "die", "at_send": 2})
    assert isinstance(err, PartyFailedError) and err.party == "client", repr(err)
    _assert_gone_and_no_output(err, work)
