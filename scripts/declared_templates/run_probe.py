import json, os, sys, glob, tempfile
from pathlib import Path
import numpy as np
from secinfer.bench import peers_suite as ps
from secinfer.runtime.launcher import run_local
wl = sys.argv[1]
out = os.environ.get("TW_PROBE_OUT") or tempfile.mkdtemp(prefix="twp-")
os.environ["TW_PROBE_OUT"] = out
tmp = Path(tempfile.mkdtemp()); p = tmp / f"{wl}.onnx"; p.write_bytes(ps.build_workload(wl).SerializeToString())
x = ps.workload_input(wl, 1)
res = run_local(protocol="astra", security="semi-honest", model_path=str(p), input_array=x, network="none",
                options={}, timeout=300, protocol_module="tw_probe")
print(wl, "online ms", res.latency_s.get("online") * 1e3, "rounds", res.rounds.get("online"),
      "bytes_online", res.bytes_by_phase.get("online"))
for f in sorted(glob.glob(out + "/*.json")):
    d = json.load(open(f))
    print("==", d["me"], "native" if d["native"] else "python")
    for r in d["rec"]:
        if r[1] == "online":
            print("  %-4s %-3s %-32s n=%d tmpl=%-5s wall=%8.1f cpu=%7.1f bytes=%d" % (r[0], r[2], r[3], r[4], r[5], r[6], r[7], r[8]))
