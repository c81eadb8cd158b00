"""The launcher's fork server (secinfer.runtime.launcher_fork): parties forked from a
process that imported their modules once, each still its own process; spawn as fallback."""

import os
import signal
import threading
import time

import numpy as np
import pytest

from proc_helpers import alive, descendants_of
from secinfer.runtime.launcher import PartyFailedError, run_local
from secinfer.runtime.launcher_fork import ForkServer

pytestmark = pytest.mark.timeout(120)
X = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -0.25]])


@pytest.fixture
def w1_model(tmp_path):
    from secinfer.bench.peers_suite import build_workload

    p = tmp_path / "w1.onnx"
    p.write_bytes(build_workload("W1").SerializeToString())
    return str(p)


def _run(start, model, **kw):
    return run_local("test-fork", model_path=model, input_array=X, protocol_module="rt_fork_protocol",
                     timeout=60, start=start, **kw)


def test_forked_parties_are_separate_processes_with_their_own_randomness(w1_model):
    res = _run("auto", w1_model)
    assert res.startup["start"] == "fork" and res.startup["fallback"] is None
    assert np.array_equal(res.output, X)
    info = {r: rec["info"] for r, rec in res.parties.items()}
    pids = {i["pid"] for i in info.values()}
    assert len(pids) == 3 and os.getpid() not in pids
    assert len({i["ppid"] for i in info.values()}) == 1            # all forked by the one server
    assert next(iter(info.values()))["ppid"] != os.getpid()
    for i in info.values():                                        # own session and process group each
        assert i["pgid"] == i["pid"] == i["sid"]
        assert i["onnx_imported"]                                  # preloaded once by the server
    assert len({tuple(i["prg"]) for i in info.values()}) == 3      # no randomness shared through the fork
    assert len({i["x25519"] for i in info.values()}) == 3
    assert info["server"]["model_loaded"] and not info["client"]["model_loaded"]


def test_spawn_gives_the_same_result_and_is_reported(w1_model):
    res = _run("spawn", w1_model)
    assert res.startup["start"] == "spawn" and "spawn" in res.startup["fallback"]
    assert np.array_equal(res.output, X)
    info = {r: rec["info"] for r, rec in res.parties.items()}
    assert {i["ppid"] for i in info.values()} == {os.getpid()}      # the launcher's own children
    assert not info["client"]["onnx_imported"]                      # a fresh interpreter each


def test_startup_report_adds_up(w1_model):
    res = _run("auto", w1_model)
    st = res.startup
    assert set(st["parties"]) == {"server", "client", "helper"}
    for marks in st["parties"].values():
        times = [marks[k] for k in ("started", "loaded", "connected", "done", "closed")]
        assert all(t is not None for t in times) and times == sorted(times)
    steps = st["steps"]
    assert all(v >= 0 for v in steps.values()) and len(steps) == 9   # (no command-line steps here)
    assert abs(sum(steps.values()) - st["events"]["merged"]) < 1e-3
    assert st["fork_server_import_s"] > 0
    assert "startup" in res.to_json()


def test_an_unusable_fork_server_falls_back_to_spawn(monkeypatch, w1_model):
    monkeypatch.setattr(ForkServer, "start", classmethod(lambda cls, *a, **k: None))
    res = _run("auto", w1_model)
    assert res.startup["start"] == "spawn" and "could not be started" in res.startup["fallback"]
    assert np.array_equal(res.output, X)


def test_a_server_with_a_thread_refuses_to_fork_and_the_run_spawns():
    # importing this protocol starts a thread: forking then is unsafe, the server says so
    res = run_local("test-ring", input_array=X, options={"rounds": 2}, protocol_module="rt_thread_protocol",
                    timeout=60)
    assert res.startup["start"] == "spawn"
    assert "unsafe" in res.startup["fallback"] and "threads" in res.startup["fallback"]
    assert np.array_equal(res.output, 4 * X + 3)


def test_a_killed_fork_server_takes_its_parties_along_and_the_run_fails_fast():
    server = ForkServer.start("test-ring", protocol_module="rt_ring_protocol")
    assert server is not None and server.wait_ready(60) is None
    killer = threading.Thread(target=lambda: (time.sleep(2.0), os.kill(server.proc.pid, signal.SIGKILL)))
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(PartyFailedError) as ei:
        run_local("test-ring", input_array=X, options={"stall": "helper"}, protocol_module="rt_ring_protocol",
                  timeout=90, fork_server=server)
    killer.join()
    assert time.monotonic() - t0 < 30
    assert "SIGKILL" in str(ei.value)
    pids = set(ei.value.pids.values())
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive(pids) == [] and alive(descendants_of(os.getpid())) == []


def test_the_model_owner_reads_the_launchers_checked_model(w1_model):
    from secinfer.ir.onnx_import import load_model

    res = _run("auto", w1_model, model_graph=load_model(w1_model))
    assert res.startup["start"] == "fork"
    info = {r: rec["info"] for r, rec in res.parties.items()}
    assert res.parties["server"]["info_model"] == "launcher" and info["server"]["model_loaded"]
    assert not any(i["onnx_imported"] for i in info.values())     # nobody imported the ONNX file again
    assert not info["client"]["model_loaded"] and "info_model" not in res.parties["client"]
    spawned = _run("spawn", w1_model, model_graph=load_model(w1_model))
    assert spawned.parties["server"]["info_model"] == "launcher"
    assert np.array_equal(spawned.output, res.output)


def test_a_bad_model_file_from_the_launcher_is_a_config_error(tmp_path):
    from secinfer.errors import ConfigError
    from secinfer.runtime.party import read_model_ir

    bad = tmp_path / "m.npz"
    bad.write_bytes(b"not an npz")
    with pytest.raises(ConfigError, match="cannot read the launcher's model file"):
        read_model_ir(bad)
    import pickle

    # the hand-over is never unpickled: a pickled object is refused like any unreadable file
    bad.write_bytes(pickle.dumps({"not": "a graph"}))
    with pytest.raises(ConfigError, match="cannot read the launcher's model file"):
        read_model_ir(bad)
    np.savez(bad, architecture=np.frombuffer(b"{}", np.uint8), head=np.frombuffer(b"{}", np.uint8))
    with pytest.raises(ConfigError, match="cannot read the launcher's model file"):
        read_model_ir(bad)


def test_the_model_hand_over_keeps_the_graph(tmp_path):
    from secinfer.api import load_graph, resolve_model
    from secinfer.runtime.launcher import write_model_ir
    from secinfer.runtime.party import read_model_ir

    ref = resolve_model("bundled:cancer-logreg")
    g = load_graph(ref)
    write_model_ir(tmp_path / "m.npz", g)
    h = read_model_ir(tmp_path / "m.npz")
    assert h.public_bytes() == g.public_bytes() and h.meaning == g.meaning
    assert list(h.initializers) == list(g.initializers)
    assert all(np.array_equal(h.initializers[k], v) and h.initializers[k].dtype == v.dtype
               for k, v in g.initializers.items())


def test_a_port_taken_meanwhile_runs_again_with_a_fresh_server(monkeypatch, w1_model):
    import socket

    from secinfer.runtime import cluster as cluster_mod

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    real, calls = cluster_mod.reserve_ports, []

    def first_one_taken(n, *a, **k):   # (another program listens on a port we hold: not a secinfer launcher)
        r = real(n, *a, **k)
        calls.append(n)
        if len(calls) == 1:
            r.ports[0] = taken.getsockname()[1]
        return r

    monkeypatch.setattr(cluster_mod, "reserve_ports", first_one_taken)
    try:
        res = _run("auto", w1_model)
    finally:
        taken.close()
    assert len(calls) == 2 and np.array_equal(res.output, X)
    assert res.startup["start"] == "fork"
    assert alive(descendants_of(os.getpid())) == []      # the first attempt's server is gone too


def test_a_small_run_tells_its_parties_to_use_the_python_record_layer(monkeypatch, w1_model):
    from secinfer.ir.onnx_import import load_model
    from secinfer.runtime.launcher import SMALL_RUN_MACS, small_run_record_layer

    monkeypatch.delenv("SECINFER_TCP_NATIVE", raising=False)
    g = load_model(w1_model)
    for start in ("auto", "spawn"):              # (forked parties get it from the server, spawned in their env)
        res = _run(start, w1_model, model_graph=g)
        assert res.startup["record_layer"] == "python (small run)"
        info = [rec["info"] for rec in res.parties.values()]
        assert all(i["env_native"] == "0" and i["record_native"] is False for i in info)
        assert np.array_equal(res.output, X)
    res = _run("auto", w1_model)                 # no checked model: nothing is decided for the parties
    assert res.startup["record_layer"] is None
    info = [rec["info"] for rec in res.parties.values()]
    assert all(i["env_native"] is None for i in info) and len({i["record_native"] for i in info}) == 1
    one = np.zeros((1, 784))                     # the rule: the model's MACs (784 here) times the batch
    assert small_run_record_layer(g, one) == {"SECINFER_TCP_NATIVE": "0"}
    assert small_run_record_layer(g, np.zeros((SMALL_RUN_MACS // 784, 784))) == {"SECINFER_TCP_NATIVE": "0"}
    assert small_run_record_layer(g, np.zeros((SMALL_RUN_MACS // 784 + 1, 784))) == {}
    assert small_run_record_layer(None, one) == {}
    assert small_run_record_layer(g, one, {"transport": "zmq"}) == {}
    monkeypatch.setenv("SECINFER_TCP_NATIVE", "1")   # the user's own choice stays
    assert small_run_record_layer(g, one) == {}


def test_a_kept_blas_controller_still_limits_blas_to_one_thread_and_restores():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from secinfer.protocols.rep3 import blas

    def blas_threads():
        return [d["num_threads"] for d in threadpoolctl.threadpool_info() if d["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("no BLAS library loaded")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        assert before and all(n == 2 for n in before)
        blas.keep_controller()                   # (as the fork server does before it forks the parties)
        try:
            with blas.one_blas_thread():
                assert blas_threads() == [1] * len(before)
            assert blas_threads() == before
        finally:
            blas._state[2] = None
