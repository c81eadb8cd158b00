#!/bin/sh
# Per-step thread CPU in situ (probe, run.py + analyze.py), arms interleaved: main (A_SRC),
# this branch (./src) with option warm_online on, and with it off. Usage:
# steps_ab.sh OUTDIR ROUNDS RUNS_PER_ROUND   (then: analyze.py OUTDIR/<arm>)
out=$1; rounds=$2; n=$3; A=${A_SRC:-/tmp/aw2_main/src}; B=$(pwd)/src; PY=${PY:-/work/main/.venv/bin/python}
for r in $(seq 1 "$rounds"); do
  for wl in W1 W2; do
    PYTHONPATH=$A:scripts/astra_timeline $PY scripts/astra_timeline/run.py $wl "$n" "$out/main/r$r" | sed -n 1p
    PYTHONPATH=$B:scripts/astra_timeline $PY scripts/astra_timeline/run.py $wl "$n" "$out/warm/r$r" | sed -n 1p
    AW_OPTIONS='{"warm_online": false}' PYTHONPATH=$B:scripts/astra_timeline $PY scripts/astra_timeline/run.py $wl "$n" "$out/nowarm/r$r" | sed -n 1p
  done
  uptime
done
