import json, os, subprocess, sys, statistics, glob, tempfile
reps, layer = int(sys.argv[1]), sys.argv[2]
arms = {"main": os.environ.get("MAIN_SRC", "/work/main/src"), "tw": os.path.abspath(os.environ.get("BRANCH_SRC", "src"))}
agg = {}
for r in range(reps):
    for a in (arms if r % 2 == 0 else list(arms)[::-1]):
        for wl in ("W1", "W2"):
            out = tempfile.mkdtemp(prefix="twp-")
            env = dict(os.environ, PYTHONPATH=arms[a] + ":scripts/declared_templates", SECINFER_TCP_NATIVE=layer, TW_PROBE_OUT=out)
            subprocess.run([sys.executable, "scripts/declared_templates/run_probe.py", wl], env=env, check=True, capture_output=True)
            for f in glob.glob(out + "/*.json"):
                d = json.load(open(f))
                for op, ph, peer, tag, n, tmpl, wall, cpu, nb in d["rec"]:
                    if ph == "online":
                        agg.setdefault((wl, op, bool(tmpl), a), []).append((cpu, wall if op == "send" else None))
for k in sorted(agg):
    v = agg[k]
    cpu = [c for c, _ in v]
    print(f"layer={layer} {k[0]} {k[1]:4s} templated={str(k[2]):5s} arm={k[3]:4s} calls={len(v):3d} "
          f"cpu_us median {statistics.median(cpu):7.1f} [{min(cpu):.1f}, {max(cpu):.1f}]")
