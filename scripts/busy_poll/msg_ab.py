"""Per-message CPU of the online sends and receives, in situ (issue #23, branch sx): python
scripts/busy_poll/msg_ab.py REPS PROTO:WL ARM [ARM ...]; ARM = name=SRC (a src tree). Each rep
runs one batch-1 semi-honest query per arm (alternating order) through ``run_local`` with the
checked graph and the ``msg_probe`` protocol module; prints per arm and message (party, dir,
peer, tag) the median [min, max] thread CPU in us, and per arm the sum over a run's online
sends+receives. ARM = name=SRC@K=V,K=V sets environment variables for that arm's parties (e.g.
SX_FIRST=1: astra's client takes its output parts with recv_first). Set SECINFER_TCP_SPIN_US=0 to keep busy-poll CPU out of the receive figures."""
import glob, json, os, statistics, subprocess, sys, tempfile

reps, item = int(sys.argv[1]), sys.argv[2]
arms, arm_env = {}, {}
for a in sys.argv[3:]:
    name, spec = a.split("=", 1)
    src, _, kv = spec.partition("@")
    arms[name] = src
    arm_env[name] = dict(x.split("=", 1) for x in kv.split(",") if x)
here = os.path.dirname(os.path.abspath(__file__))
proto, wl = item.split(":")
drv = r'''
import os, sys, json, tempfile
from pathlib import Path
from secinfer.bench import peers_suite as ps
from secinfer.runtime.launcher import run_local
from secinfer.ir.onnx_import import load_model
from secinfer.protocols import registry
proto, wl = sys.argv[1], sys.argv[2]
p = Path(tempfile.mkdtemp()) / (wl + ".onnx"); p.write_bytes(ps.build_workload(wl).SerializeToString())
res = run_local(protocol=proto, security="semi-honest", model_path=str(p), input_array=ps.workload_input(wl, 1),
                network="none", options={}, timeout=300, protocol_module="msg_probe", model_graph=load_model(str(p)))
print(json.dumps({"o2o": ps._to_output(res.meters, registry.get(proto).input_role) * 1e3, "y": res.output.tolist()}))
'''
res = {a: [] for a in arms}
spins = {}   # arm -> party -> [online waits whose spin got the frame, waits whose spin ran out] (all runs)
load = [os.getloadavg()[0]]
ys = set()
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        out = tempfile.mkdtemp(prefix="sxp-")
        env = dict(os.environ, PYTHONPATH=os.path.abspath(arms[a]) + ":" + here, SX_PROBE_OUT=out, SX_PROTO=proto, **arm_env[a])
        cp = subprocess.run([sys.executable, "-c", drv, proto, wl], env=env, capture_output=True, text=True)
        if cp.returncode:
            sys.exit(f"arm {a} failed:\n{cp.stderr[-3000:]}")
        o = json.loads(cp.stdout.strip().splitlines()[-1])
        ys.add(json.dumps(o["y"]))
        msgs = {}
        for f in glob.glob(out + "/*.json"):
            d = json.load(open(f))
            for peer, (hit, miss) in d.get("spin", {}).items():
                sp = spins.setdefault(a, {}).setdefault(d["me"], [0, 0])
                sp[0] += hit
                sp[1] += miss
            seen = {}
            for kind, peer, tag, cpu, wall in d["rec"]:
                k = (d["me"], kind, peer, tag)
                seen[k] = seen.get(k, 0) + 1
                msgs[k + (seen[k],)] = (cpu / 1e3, wall / 1e3)
        res[a].append((o["o2o"], msgs))
    load.append(os.getloadavg()[0])
print(f"reps={reps} {item} spin={os.environ.get('SECINFER_TCP_SPIN_US', 'default')} "
      f"layer={os.environ.get('SECINFER_TCP_NATIVE', 'launcher')} load {min(load):.1f}-{max(load):.1f} distinct outputs {len(ys)}")
keys = sorted({k for a in arms for _, m in res[a] for k in m})
def med(v):
    return f"{statistics.median(v):7.1f} [{min(v):.0f}, {max(v):.0f}]" if v else "-"
for a in arms:
    o2o = [x for x, _ in res[a]]
    tot = [sum(c for c, _ in m.values()) for _, m in res[a]]
    print(f"{a:6s} o2o_ms {med(o2o)}  online send+recv CPU us per run {med(tot)}")
for a in arms:
    if spins.get(a):
        print(f"{a:6s} busy-poll (Python layer, all runs): " + "; ".join(
            f"{me} {h} hit / {m} ran out" for me, (h, m) in sorted(spins[a].items())))
if os.environ.get("SX_DETAIL", "1") == "1":
    for k in keys:
        print(f"{'/'.join(map(str, k)):48s}", "  ".join(f"{a}: cpu {med([m[k][0] for _, m in res[a] if k in m])}"
                                                       for a in arms))
