"""python scripts/busy_poll/run_miss.py REPS PROTO:WL[,...]  (PYTHONPATH: src and scripts/busy_poll)
Counts, per party, why online receives of small one-array frames missed the fast path."""
import collections, glob, json, os, sys, tempfile
from pathlib import Path
from secinfer.bench import peers_suite as ps
from secinfer.runtime.launcher import run_local
from secinfer.ir.onnx_import import load_model
reps = int(sys.argv[1])
for item in sys.argv[2].split(","):
    proto, wl = item.split(":")
    os.environ["MISS_PROTO"] = proto
    tmp = Path(tempfile.mkdtemp()); p = tmp / f"{wl}.onnx"; p.write_bytes(ps.build_workload(wl).SerializeToString())
    x = ps.workload_input(wl, 1)
    tally = collections.defaultdict(collections.Counter)
    layer = None
    for _ in range(reps):
        out = tempfile.mkdtemp(prefix="miss-")
        os.environ["MISS_PROBE_OUT"] = out
        run_local(protocol=proto, security="semi-honest", model_path=str(p), input_array=x, network="none",
                  options={}, timeout=300, model_graph=load_model(str(p)), protocol_module="miss_probe")
        for f in glob.glob(out + "/*.json"):
            d = json.load(open(f))
            layer = "native" if d["native"] else "python"
            for ph, peer, tag, why, nb in d["rec"]:
                if ph == "online":
                    tally[d["me"]][why] += 1
    print(f"{item} ({layer} layer, {reps} runs): online receives by party:")
    for me in sorted(tally):
        print(f"   {me:8s} {dict(tally[me])}")
