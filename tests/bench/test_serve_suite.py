"""Issue #22 item 10: `secinfer bench serve` on a small plan (the reference protocol only):
load rows at 1/4/16 clients, a fault row with 0 lost sessions and every server alive, a
soak row with RSS and the servers' live per-session state sampled, the pool row, plots."""

import os

from secinfer.bench import serve_suite
from secinfer.bench.suites import write_plots


def test_serve_suite_small_plan_rows_faults_soak_and_plots(tmp_path):
    res = serve_suite.run(quick=True, protocols={"reference": ((2, 4, 8), 20, 1)})
    kinds = [r["kind"] for r in res["rows"]]
    assert kinds == ["load", "load", "load", "faults", "soak", "pool"], kinds
    loads = [r for r in res["rows"] if r["kind"] == "load"]
    assert [r["clients"] for r in loads] == [1, 4, 16]
    assert all(r["ok"] == r["queries"] and r["errors"] == 0 and r["qps"] > 0 and r["p99_s"] >= r["p50_s"]
               for r in loads), loads
    faults = next(r for r in res["rows"] if r["kind"] == "faults")
    assert faults["lost"] == 0 and faults["servers_alive"] and faults["garbage_sessions_failed"] == 1, faults
    soak = next(r for r in res["rows"] if r["kind"] == "soak")
    assert soak["queries"] == 20 and soak["lost"] == 0 and soak["client_errors"] == 0, soak
    samples = res["raw"]["reference"]["soak"]["samples"]
    assert len(samples) >= 2 and all(s["rss_kb"]["server"] > 0 for s in samples)
    last = samples[-1]["live"]["server"]
    # a session whose client already has its answer may still be closing in its thread (its
    # table entry gone, its job and endpoint not yet released): bounded by the live threads
    assert last["seen_nonces"] >= 20 and last["jobs"] <= last["sessions"] + last["session_threads"], last
    assert res["raw"]["reference"]["exit_codes"] == {"server": 0}
    files = write_plots(res, str(tmp_path))
    assert len(files) == 3     # latency, throughput, RSS over the soak
    for n in files:
        assert os.path.getsize(os.path.join(tmp_path, os.path.basename(n))) > 0
