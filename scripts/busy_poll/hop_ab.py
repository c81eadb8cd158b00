"""Hop rows (``secinfer.bench.hop.measure``) of several arms, interleaved.

python scripts/busy_poll/hop_ab.py REPS LAYER ARM [ARM ...]   (from the repository root)
ARM = name=SRC[:SPIN_US[:YIELD]]  (SRC: a ``src`` directory; SPIN_US/YIELD set
SECINFER_TCP_SPIN_US / SECINFER_TCP_SPIN_YIELD; LAYER: SECINFER_TCP_NATIVE, 0 or 1).
Env PINGS (3000), BULK_MB (0: no bulk phase measured, else MB per burst, 32 frames).
"""
import json, os, statistics, subprocess, sys

reps, layer = int(sys.argv[1]), sys.argv[2]
arms = {}
for a in sys.argv[3:]:
    name, spec = a.split("=", 1)
    src, *rest = spec.split(":")
    arms[name] = (os.path.abspath(src), rest[0] if rest else None, rest[1] if len(rest) > 1 else None)
pings = int(os.environ.get("PINGS", 3000))
bulk = int(os.environ.get("BULK_MB", 16))
code = ("import json,sys; from secinfer.bench import hop; "
        f"print(json.dumps(hop.measure('tcp', pings={pings}, bulk_mb={max(bulk, 1)}, bulk_frames=32, bulk_bursts=1)))")
res = {a: [] for a in arms}
load = [os.getloadavg()[0]]
for r in range(reps):
    order = list(arms) if r % 2 == 0 else list(arms)[::-1]
    for a in order:
        src, spin, yld = arms[a]
        env = dict(os.environ, PYTHONPATH=src, SECINFER_TCP_NATIVE=layer)
        env.pop("SECINFER_TCP_SPIN_US", None)
        env.pop("SECINFER_TCP_SPIN_YIELD", None)
        if spin is not None:
            env["SECINFER_TCP_SPIN_US"] = spin
        if yld is not None:
            env["SECINFER_TCP_SPIN_YIELD"] = yld
        o = json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                                      text=True).stdout.strip().splitlines()[-1])
        res[a].append(o)
    load.append(os.getloadavg()[0])
print(f"layer={layer} reps={reps} load {min(load):.1f}-{max(load):.1f}")
for a, rows in res.items():
    def col(k):
        v = [r[k] for r in rows if k in r]
        return f"{statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]" if v else "-"
    print(f"{a:10s} {rows[0].get('record_layer')} one_way_us {col('one_way_us_median')} cpu_us {col('one_way_cpu_us')} "
          f"p90 {col('one_way_us_p90')}" + (f" bulk_MB_s {col('bulk_MB_s')} send_MB/cpu_s {col('bulk_send_MB_per_cpu_s')} "
                                             f"recv_MB/cpu_s {col('bulk_recv_MB_per_cpu_s')}" if bulk else ""))
