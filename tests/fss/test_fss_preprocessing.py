"""Preprocessing store: single use, persistence without pickle, typed errors, dealer over
an Endpoint."""

import numpy as np
import pytest

from secinfer.crypto.fss.gates import GateKey, make_gate
from secinfer.crypto.preprocessing import (ArrayItem, Dealer, EndpointProvider, PreprocessingMissingError,
                                           PreprocessingStore, StoreProvider)
from secinfer.crypto.prg import PRG
from secinfer.errors import PreprocessingReuseError, SerializationError
from secinfer.net.channel import run_local


def _stores_with_relu(count=6, mu=99):
    gate = make_gate("relu", 16, 56, mac=True)
    stores = (PreprocessingStore("P0"), PreprocessingStore("P1"))
    Dealer(PRG.for_tests(1)).produce(gate, "L1/relu", count, stores, mac_key=mu)
    return gate, stores


def test_item_is_consumed_exactly_once():
    gate, (s0, s1) = _stores_with_relu()
    k0 = s0.take("L1/relu", GateKey.kind, expect=gate, party=0)
    assert isinstance(k0, GateKey) and k0.count == 6 and k0.party == 0
    with pytest.raises(PreprocessingReuseError):
        s0.take("L1/relu")
    with pytest.raises(PreprocessingReuseError):
        s0.put("L1/relu", k0)  # a used label cannot be refilled
    with pytest.raises(PreprocessingReuseError):
        s1.put("L1/relu", k0)  # nor overwritten while unused
    with pytest.raises(PreprocessingMissingError):
        s0.take("never-dealt")
    assert "L1/relu" not in s0 and s0.consumed() == ["L1/relu"]


def test_store_written_to_disk_and_read_back(tmp_path):
    gate, (s0, s1) = _stores_with_relu()
    s0.put("mask", ArrayItem({"r": np.arange(5, dtype=np.uint64)}))
    s0.put("used", ArrayItem({"r": np.arange(2, dtype=np.uint64)}))
    s0.take("used")
    path = tmp_path / "p0.npz"
    s0.save(path)
    back = PreprocessingStore.load(path)
    assert not path.exists()  # load removes the file: it cannot feed a second session
    assert back.labels() == ["L1/relu", "mask"] and back.consumed() == ["used"]
    with pytest.raises(PreprocessingReuseError):
        back.take("used")
    assert np.array_equal(back.take("mask", "arrays").arrays["r"], np.arange(5, dtype=np.uint64))
    # the key read back from disk still works with the other party's key
    k0 = back.take("L1/relu", expect=gate, party=0)
    k1 = s1.take("L1/relu")
    x = PRG.for_tests(2).ring((6,), 16)
    xhat = (x + k0.shares["r"][:, 0] + k1.shares["r"][:, 0]) & np.uint64(0xFFFF)
    g = gate.group
    relu = g.add(gate.eval_local(k0, xhat)["relu"], gate.eval_local(k1, xhat)["relu"])
    signed = [int(v) - (1 << 16) if v >> 15 else int(v) for v in x]
    assert [int(v) for v in g.to_int(relu)] == [max(v, 0) for v in signed]


def test_malformed_store_files(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file at all")
    with pytest.raises(SerializationError):
        PreprocessingStore.load(bad)
    np.savez(tmp_path / "nomani.npz", x=np.zeros(3))
    with pytest.raises(SerializationError):
        PreprocessingStore.load(tmp_path / "nomani.npz")
    # an object array would need pickle: refused
    np.savez(tmp_path / "obj.npz", manifest=np.array([{"a": 1}], dtype=object))
    with pytest.raises(SerializationError):
        PreprocessingStore.load(tmp_path / "obj.npz")
    # a tampered key inside a valid store is caught when the item is taken
    gate, (s0, _) = _stores_with_relu()
    s0.save(tmp_path / "ok.npz")
    with np.load(tmp_path / "ok.npz") as z:
        files = {k: z[k] for k in z.files}
    victim = next(k for k in files if k != "manifest" and files[k].ndim == 3)
    files[victim] = files[victim][:, :-1]
    np.savez(tmp_path / "tampered.npz", **files)
    store = PreprocessingStore.load(tmp_path / "tampered.npz")
    with pytest.raises(SerializationError):
        store.take("L1/relu", expect=gate)


def test_dealer_over_endpoint():
    gate = make_gate("sign", 24, 64, mac=True)
    count, mu = 10, 4242

    def dealer(ep):
        k0, k1 = Dealer(PRG.for_tests(3)).gate_keys(gate, "s1", count, mac_key=mu)
        with ep.phase("offline"):
            Dealer.send_item(ep, "P0", "s1", k0)
            Dealer.send_item(ep, "P1", "s1", k1)
        return ep.meter.total("offline", "sent")

    def party(b):
        def fn(ep):
            prov = EndpointProvider(ep, "D", b)
            with ep.phase("offline"):
                key = prov.take("s1", expect=gate, count=count)
            with pytest.raises(PreprocessingReuseError):
                prov.take("s1", expect=gate, count=count)
            return key
        return fn

    res = run_local({"D": dealer, "P0": party(0), "P1": party(1)})
    k0, k1 = res["P0"], res["P1"]
    assert isinstance(k0, GateKey) and k0.party == 0 and k1.party == 1
    assert res["D"] >= 2 * count * gate.cost().key_bytes
    x = PRG.for_tests(4).ring((count,), 24)
    xhat = (x + k0.shares["r"][:, 0] + k1.shares["r"][:, 0]) & np.uint64((1 << 24) - 1)
    g = gate.group
    d = g.add(gate.eval_local(k0, xhat)["drelu"], gate.eval_local(k1, xhat)["drelu"])
    assert [int(v) for v in g.to_int(d)] == [int(not (int(v) >> 23)) for v in x]


def test_store_provider_passthrough():
    gate, (s0, _) = _stores_with_relu()
    prov = StoreProvider(s0)
    assert prov.take("L1/relu", expect=gate).count == 6
    with pytest.raises(PreprocessingReuseError):
        prov.take("L1/relu")


def test_dealer_never_repeats_randomness():
    gate = make_gate("relu", 16)
    dealer = Dealer(PRG.for_tests(5))
    a0, _ = dealer.gate_keys(gate, "a", 8)
    b0, _ = dealer.gate_keys(gate, "b", 8)
    assert not np.array_equal(a0.shares["r"], b0.shares["r"])
    assert not np.array_equal(a0.dcfs[0].seed, b0.dcfs[0].seed)
    with pytest.raises(PreprocessingReuseError):
        dealer.gate_keys(gate, "a", 8)


def test_bench_run_small():
    from secinfer.bench import fss_bench as bench
    res = bench.run(sizes=(64,), n_bits=16)
    rows = {r["gate"]: r for r in res["results"]}
    assert set(rows) == {"relu-mac", "relu"}
    assert rows["relu-mac"]["out_bits"] == 56 and rows["relu-mac"]["count"] == 64
    assert rows["relu-mac"]["key_bytes_measured"] == rows["relu-mac"]["key_bytes_per_relu_per_party"]
    assert rows["relu"]["online_bits_per_relu_per_party"] == 16
