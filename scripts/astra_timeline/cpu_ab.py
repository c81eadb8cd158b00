"""Interleaved A/B of two source trees (A_SRC, B_SRC; default /work/main/src and ./src) with the
probe: client span and per-party online CPU. Usage: cpu_ab.py W1 REPS"""
import os, re, statistics, subprocess, sys
wl, reps = sys.argv[1], int(sys.argv[2])
here = os.path.dirname(os.path.abspath(__file__))
arms = {"main": os.environ.get("A_SRC", "/work/main/src"), "branch": os.environ.get("B_SRC", os.path.abspath("src"))}
res = {a: {"span": [], "cpu": {}} for a in arms}
for r in range(reps):
    for a in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        env = dict(os.environ, PYTHONPATH=arms[a] + ":" + here)
        out = subprocess.run([sys.executable, os.path.join(here, "run.py"), wl, "1"], env=env, capture_output=True,
                             text=True, check=True).stdout.splitlines()
        res[a]["span"].append(float(out[0].split("median ")[1].split()[0]))
        for me, v in re.findall(r"(\w+) (\d+) \[", out[1]):
            res[a]["cpu"].setdefault(me, []).append(float(v))
for a in arms:
    s = res[a]["span"]
    cp = res[a]["cpu"]
    print(f"{wl} {a:6s} span us {statistics.median(s):.0f} [{min(s):.0f}, {max(s):.0f}]; online CPU us",
          "; ".join(f"{m} {statistics.median(v):.0f} [{min(v):.0f}, {max(v):.0f}]" for m, v in sorted(cp.items())),
          "; sum", round(sum(statistics.median(v) for v in cp.values())))
