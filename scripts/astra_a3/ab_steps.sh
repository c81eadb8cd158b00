#!/bin/sh
# Per-step thread CPU in situ, main (A_SRC, default /tmp/base-src) against this tree, the arms'
# order alternating by round (scripts/astra_timeline/run.py with its probe), then each step's CPU
# per arm (analyze.py) and each party's online CPU (cpu_sum.py).
# Usage: scripts/astra_a3/ab_steps.sh OUTDIR ROUNDS RUNS_PER_ROUND
out=$1; rounds=$2; n=$3; PY=${PY:-/work/main/.venv/bin/python}
A=${A_SRC:-/tmp/base-src}; B=$(pwd)/src
for r in $(seq 1 "$rounds"); do
  for wl in W1 W2; do
    if [ $((r % 2)) -eq 1 ]; then order="main branch"; else order="branch main"; fi
    for arm in $order; do
      if [ "$arm" = main ]; then src=$A; else src=$B; fi
      PYTHONPATH=$src:scripts/astra_timeline $PY scripts/astra_timeline/run.py $wl "$n" "$out/$arm/r$r" | sed -n 1p
    done
  done
  uptime
done
for arm in main branch; do
  echo "== $arm"
  PYTHONPATH=src:scripts/astra_timeline $PY scripts/astra_timeline/analyze.py "$out/$arm"/r* 2>&1 | grep -A2 compute | grep -v "(wall)" | grep -v "^--"
done
PYTHONPATH=src:scripts/astra_timeline $PY scripts/astra_timeline/cpu_sum.py "$out"
