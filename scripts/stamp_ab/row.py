# one arm: secinfer.bench.peers_suite.run(plan=[("W3",1),("W4",1)], protocols=["stamp"], reps=1); one JSON line
import json, sys
from secinfer.bench import peers_suite as ps
r = ps.run(plan=[("W3", 1), ("W4", 1)], protocols=["stamp"], reps=1)
print(json.dumps({"tree": ps.__file__.rsplit("/src/", 1)[0], "rows": [
    {k: row.get(k) for k in ("workload", "online_to_output_ms", "online_ms", "bytes_online", "rounds_online",
                             "max_abs_err_vs_reference")} for row in r["rows"]]}))
