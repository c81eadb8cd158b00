"""secinfer bench: adapters turn small real runs into rows + plots; write_plots writes PNGs."""

from __future__ import annotations

import json
import os

import pytest

from secinfer.bench import suites
from secinfer.errors import ConfigError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _check_plots(result: dict, folder) -> list[str]:
    assert result["plots"], "at least one plot"
    for p in result["plots"]:
        assert p["kind"] in ("line", "bar")
        assert p["file"].endswith(".png")
        for name, ys in p["series"].items():
            assert len(ys) == len(p["x"]), (p["file"], name)
    paths = suites.write_plots(result, str(folder))
    assert len(paths) == len(result["plots"])
    for path in paths:
        with open(path, "rb") as f:
            head = f.read(8)
        assert head == PNG_MAGIC
        assert os.path.getsize(path) > 2000
    return paths


@pytest.mark.slow
def test_fss_adapter_rows_ratios_and_plots(tmp_path):
    from secinfer.bench.micro_suites import run_fss

    r = run_fss(network="lan,wan", sizes=(64, 256), n_bits=16)
    assert r["suite"] == "fss" and r["raw"]["results"]
    rows = r["rows"]
    assert {(x["variant"], x["count"]) for x in rows} == {("mac", 64), ("plain", 64), ("mac", 256), ("plain", 256)}
    for x in rows:
        assert x["online_rounds"] == 1
        assert x["online_wan_model_s"] > x["online_lan_model_s"] > 0
        if x["variant"] == "mac":
            assert x["out_bits"] == 16 + 40
            # the MAC'd gate's keys are larger (lifted ring), the online message is the same n bits
            assert x["ratio_key_bytes_vs_plain"] > 1.0
            assert x["ratio_online_bits_vs_plain"] == pytest.approx(1.0)
            assert x["ratio_eval_vs_plain"] > 0
        else:
            assert "ratio_eval_vs_plain" not in x
        if x["backend"] == "native":   # the numpy reference measured in the same run
            assert x["ratio_eval_native_vs_numpy"] > 0 and x["ratio_keygen_native_vs_numpy"] > 0
    _check_plots(r, tmp_path)


@pytest.mark.slow
def test_runtime_adapter_tiny_batch(tmp_path):
    from secinfer.bench import runtime_suite

    r = runtime_suite.run(quick=True, network="none", batches=[1],
                          hop_sizes={"pings": 20, "bulk_mb": 2, "bulk_frames": 4}, command_reps=2)
    cmd = [x for x in r["rows"] if x.get("row") == "command"]
    assert len(cmd) == 1 and cmd[0] is r["command"]      # the whole `secinfer run` on W1 (issue #23 item 2)
    c = cmd[0]
    assert c["workload"] == "W1" and c["reps"] == 2 and len(c["command_s_all"]) == 2
    assert 0 < c["command_s_min"] <= c["command_s"] <= c["command_s_max"] and c["target_s"] == 0.5
    assert c["party_start"] == ["fork"] and c["fallbacks"] == []
    steps = c["startup_steps_median_s"]
    assert "parties connect the mesh" in steps and "checks before launch (imports, model, input)" in steps
    assert sum(steps.values()) < c["command_s_max"]
    hops = [x for x in r["rows"] if x.get("row") == "hop"]
    assert sorted(h["transport"] for h in hops) == ["tcp", "zmq"]
    for h in hops:   # the transport alone: a small frame's one-way latency and bulk MB/s
        assert 0 < h["one_way_us_p10"] <= h["one_way_us_median"] <= h["one_way_us_p90"]
        assert h["bulk_MB_s"] > 0 and h["bulk_MB"] == pytest.approx(2 * 1.048576)
        assert h["target_one_way_us"] == 50.0
    rows = [x for x in r["rows"] if x.get("row") not in ("hop", "command")]
    assert len(rows) == 1
    row = rows[0]
    assert row["network"] == "none" and row["batch"] == 1
    assert row["bytes_total"] > 0 and row["rounds_online"] >= 1
    assert row["ratio_vs_none"] == pytest.approx(1.0)
    _check_plots(r, tmp_path)


@pytest.mark.slow
def test_he_adapter_small_set(tmp_path):
    from secinfer.bench.micro_suites import run_he

    r = run_he(sets=("ckks-n11-insecure",), repeats=1, packing_sets=("rlwe-n9-insecure",),
               packing_noise=((16, "rlwe-n9-insecure"),))
    metrics = {(x.get("params"), x["metric"]) for x in r["rows"]}
    # SAFHIRE packing rows: key switches per coefficient next to the paper's Table 1, checks
    pack = [x for x in r["rows"] if x["metric"] == "pack_per_coeff" and x["n_packed"] == 512]
    assert {x["gamma"]: x["key_switches"] for x in pack} == {0: 511, 1: 255, 2: 127}
    assert all("paper_table1_key_switches_per_coeff" in x for x in pack)
    checks = [x for x in r["rows"] if x["metric"].startswith("check/")]
    assert checks and all(x["value"] == "ok" for x in checks)
    assert {x["gamma"] for x in r["rows"] if x["metric"] == "noise_after_packing"} == {0, 1, 2}
    assert ("ckks-n11-insecure", "mul_ct_relin") in metrics
    hoisted = next(x for x in r["rows"] if x["metric"] == "rotate_hoisted_per_rotation")
    assert hoisted["ratio_vs_plain_rotate"] > 0
    sizes = {x["metric"]: x["bytes"] for x in r["rows"] if "bytes" in x}
    # a fresh ciphertext (all levels) is larger than one at level 0; eval keys dwarf a ciphertext
    assert sizes["bytes/ciphertext_fresh"] > sizes["bytes/ciphertext_level0"] > 0
    assert sizes["bytes/eval_keys"] > sizes["bytes/ciphertext_fresh"]
    assert r["raw"]["sets"]["ckks-n11-insecure"]["log_n"] == 11
    _check_plots(r, tmp_path)


@pytest.mark.slow
def test_astra_adapter_small(tmp_path):
    from secinfer.bench import astra_suite

    r = astra_suite.run(network="lan", d=16, sweep=(), aes=False, micro=False)
    by_table = {}
    for x in r["rows"]:
        by_table.setdefault(x["table"], []).append(x)
    assert set(by_table) == {"6/7", "8/9", "10"}
    for x in by_table["10"]:
        # the restricted P0-P2 link hurts the baseline, which uses every link, far more than ASTRA
        assert x["improv_throughput"] > 2.0
    mal_reg = next(x for x in by_table["6/7"] if x["security"] == "malicious")
    assert mal_reg["improv_online_bytes"] > 1.0 and mal_reg["aby3_online_rounds"] > mal_reg["astra_online_rounds"]
    _check_plots(r, tmp_path)


def test_crisp_ratios_against_semi_honest():
    from secinfer.bench.crisp_suite import _with_ratios

    rows = [{"kind": "relu", "gate": "relu", "count": 8, "online_s": 1.0, "online_lan_model_s": 2.0,
             "online_bytes_per_party": 64, "key_bytes_both": 100},
            {"kind": "relu", "gate": "relu-mac", "count": 8, "online_s": 3.0, "online_lan_model_s": 5.0,
             "online_bytes_per_party": 64, "key_bytes_both": 250},
            {"kind": "fc", "layer": "L", "he_params": "p", "security": "semi-honest", "online_s": 2.0, "online_MB": 1.0,
             "server_offline_s": 1.0},
            {"kind": "fc", "layer": "L", "he_params": "p", "security": "malicious", "online_s": 3.0, "online_MB": 2.0,
             "server_offline_s": 4.0}]
    out = _with_ratios(rows)
    assert out[1]["ratio_online_s_vs_semi_honest"] == pytest.approx(3.0)
    assert out[1]["ratio_key_bytes_vs_semi_honest"] == pytest.approx(2.5)
    assert out[1]["ratio_online_bytes_vs_semi_honest"] == pytest.approx(1.0)
    assert "ratio_online_s_vs_semi_honest" not in out[0]
    assert out[3]["ratio_online_MB_vs_semi_honest"] == pytest.approx(2.0)
    assert out[3]["ratio_offline_s_vs_semi_honest"] == pytest.approx(4.0)


def test_run_one_writes_json_and_pngs(tmp_path, monkeypatch):
    from secinfer.bench import micro_suites

    monkeypatch.setattr(micro_suites, "FSS_QUICK_SIZES", (32,))
    folder = suites.run_one("fss", out=str(tmp_path), quick=True, network="lan", echo=False)
    with open(os.path.join(folder, "results.json")) as f:
        res = json.load(f)
    assert res["suite"] == "fss" and res["quick"] is True
    assert res["command"] == "secinfer bench fss --quick --network lan"
    assert res["machine"]["cpus"] and "load_avg" in res["machine"]
    assert len(res["rows"]) == 2 and res["raw"]["results"]
    for name in res["plot_files"]:
        with open(os.path.join(folder, name), "rb") as f:
            assert f.read(8) == PNG_MAGIC


def test_unknown_suite_and_bad_network_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown benchmark suite"):
        suites.run_suite("no-such-suite", out=str(tmp_path))
    with pytest.raises(ConfigError):
        suites.run_one("nope", out=str(tmp_path))
    from secinfer.bench import astra_suite, stamp_suite
    from secinfer.bench.micro_suites import run_fss

    with pytest.raises(ConfigError, match="network profile"):
        astra_suite.run(network="mars")
    with pytest.raises(ConfigError, match="network profile"):
        stamp_suite.run(network="lan,moon")
    with pytest.raises(ConfigError):
        run_fss(network="bw=0", sizes=(8,))
    assert not os.listdir(tmp_path)


def test_cli_bench_list(capsys):
    from secinfer.cli.main import main

    assert main(["bench", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("runtime", "he", "fss", "astra", "stamp", "crisp", "peers", "all"):
        assert name in out


def test_all_runs_every_suite_and_reports_failures(tmp_path, monkeypatch, capsys):
    from secinfer.bench import micro_suites

    monkeypatch.setattr(micro_suites, "FSS_QUICK_SIZES", (16,))
    monkeypatch.setattr(suites, "SUITES", {"fss": suites.SUITES["fss"],
                                           "broken": ("secinfer.bench.no_such_module", "run")})
    assert suites.run_suite("all", out=str(tmp_path), quick=True) == 1
    index = [f for f in os.listdir(tmp_path) if f.startswith("all-")]
    assert len(index) == 1
    with open(tmp_path / index[0]) as f:
        summary = json.load(f)
    assert set(summary["folders"]) == {"fss"} and set(summary["failed"]) == {"broken"}
    assert "ConfigError" in summary["failed"]["broken"]["error"]
    assert os.path.exists(os.path.join(summary["folders"]["fss"], "results.json"))
    assert "broken   FAILED" in capsys.readouterr().out


@pytest.mark.slow
def test_stamp_suite_small_run_rows_lines_and_partial(tmp_path):
    """One real STAMP-vs-Falcon+ row (Network-A, batch 3): table rows for Tables 1 and 3,
    printable summary lines (formatted, not template text), one JSON line per result in
    the partial file, written as soon as the row is done."""
    from secinfer.bench import stamp_suite

    part = tmp_path / "partial.jsonl"
    res = stamp_suite.run(networks=("secureml-a",), batch=3, securities=("semi-honest",), network="wan",
                          partial=str(part))
    tables = {r["table"] for r in res["rows"]}
    assert {"1", "3"} <= tables
    lat = [r for r in res["rows"] if r["table"] == "1"]
    assert {r["ltee"] for r in lat} == {"ltee-chip", "ltee-soc"}
    assert all(r["speedup_vs_falcon"] > 0 and r["batch"] == 3 for r in lat)
    (line,) = [json.loads(s) for s in part.read_text().splitlines()]
    assert line["network"] == "secureml-a" and line["batch"] == 3
    assert line["lines"] and all("{" not in s and " MB vs " in s for s in line["lines"])
    (comm,) = [r for r in res["rows"] if r["table"] == "3"]
    assert comm["stamp_max_err_units"] == 0 and comm["stamp_prediction_agreement"] == 1.0   # = oracle
    assert comm["falcon_max_err_units"] >= 0


@pytest.mark.slow
def test_run_one_gives_long_suites_a_partial_file(tmp_path, monkeypatch):
    """``secinfer bench stamp`` keeps each finished result in <folder>/partial.jsonl."""
    from secinfer.bench import stamp_suite

    monkeypatch.setattr(stamp_suite, "QUICK_NETWORKS", ("secureml-a",))
    monkeypatch.setattr(stamp_suite, "QUICK_BATCH", 3)
    folder = suites.run_one("stamp", out=str(tmp_path), quick=True, network="wan", echo=False)
    names = os.listdir(folder)
    assert "results.json" in names and "partial.jsonl" in names
    lines = open(os.path.join(folder, "partial.jsonl")).read().splitlines()
    assert [(json.loads(s)["network"], json.loads(s)["security"]) for s in lines] == \
        [("secureml-a", "semi-honest"), ("secureml-a", "malicious")]
