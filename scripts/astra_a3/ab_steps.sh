#!/bin/sh
# Per-step thread CPU in situ, main (A_SRC, default /tmp/base-src) against this tree, interleaved
# (scripts/astra_timeline/steps_ab2.sh), then each step's CPU per arm and each party's online CPU.
# Usage: scripts/astra_a3/ab_steps.sh OUTDIR ROUNDS RUNS_PER_ROUND
out=$1; PY=${PY:-/work/main/.venv/bin/python}
A_SRC=${A_SRC:-/tmp/base-src} sh scripts/astra_timeline/steps_ab2.sh "$out" "$2" "$3"
for arm in main branch; do
  echo "== $arm"
  PYTHONPATH=src:scripts/astra_timeline $PY scripts/astra_timeline/analyze.py "$out/$arm"/r* 2>&1 | grep -A2 compute | grep -v "(wall)" | grep -v "^--"
done
PYTHONPATH=src:scripts/astra_timeline $PY scripts/astra_timeline/cpu_sum.py "$out"
