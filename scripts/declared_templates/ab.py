import json, os, subprocess, sys, statistics
reps, layer = int(sys.argv[1]), sys.argv[2]
arms = {"main": os.environ.get("MAIN_SRC", "/work/main/src"), "tw": os.path.abspath(os.environ.get("BRANCH_SRC", "src"))}
res = {a: {"W1": [], "W2": []} for a in arms}
outs = {}
for r in range(reps):
    for a in (arms if r % 2 == 0 else list(arms)[::-1]):
        env = dict(os.environ, PYTHONPATH=arms[a], SECINFER_TCP_NATIVE=layer, PYTHONDONTWRITEBYTECODE="1")
        o = json.loads(subprocess.run([sys.executable, "scripts/declared_templates/one.py", "W1,W2"], env=env, check=True,
                                      capture_output=True, text=True).stdout.strip().splitlines()[-1])
        for wl in o:
            res[a][wl].append(o[wl]["o2o"])
            outs.setdefault((wl,), set()).add((json.dumps(o[wl]["y"]), o[wl]["bytes"], o[wl]["rounds"]))
for wl in ("W1", "W2"):
    for a in arms:
        v = res[a][wl]
        print(f"layer={layer} {wl} {a:5s} online_to_output_ms median {statistics.median(v):.3f} "
              f"[{min(v):.3f}, {max(v):.3f}] n={len(v)} all={[round(x, 2) for x in v]}")
for k, v in outs.items():
    print(k, "distinct (output, bytes, rounds):", len(v), [(b, r) for _, b, r in v])
