#!/bin/sh
# Per-step probe records, two arms interleaved: main (A_SRC, default /work/main/src) and this
# tree (./src). Usage: steps_ab2.sh OUTDIR ROUNDS RUNS_PER_ROUND; then analyze.py OUTDIR/<arm>/r*,
# cpu_sum.py OUTDIR, xgap.py OUTDIR/<arm>/r*.
out=$1; rounds=$2; n=$3; A=${A_SRC:-/work/main/src}; B=$(pwd)/src; PY=${PY:-/work/main/.venv/bin/python}
for r in $(seq 1 "$rounds"); do
  for wl in W1 W2; do
    PYTHONPATH=$A:scripts/astra_timeline $PY scripts/astra_timeline/run.py $wl "$n" "$out/main/r$r" | sed -n 1p
    PYTHONPATH=$B:scripts/astra_timeline $PY scripts/astra_timeline/run.py $wl "$n" "$out/branch/r$r" | sed -n 1p
  done
  uptime
done
