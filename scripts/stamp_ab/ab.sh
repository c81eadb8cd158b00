#!/bin/bash
# Interleaved A/B of STAMP batch-1 cells (docs/protocols/stamp.md, sixth and seventh passes).
# usage: scripts/stamp_ab/ab.sh N SRC_A SRC_B [OUT]   (SRC_*: a tree's src folder, e.g. /work/main/src)
# Each cell is one run_local in its own process (cell.py, as `secinfer bench peers` runs it);
# appends one JSON line per cell to OUT (default ./stamp_ab.jsonl).
N=${1:-9}; A=${2:?src folder of arm a}; B=${3:?src folder of arm b}; OUT=${4:-stamp_ab.jsonl}
PY=${PY:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
for i in $(seq 1 "$N"); do
  for wl in W3 W4; do
    for arm in a b; do
      src=$A; [ $arm = b ] && src=$B
      r=$(PYTHONPATH=$src timeout 120 "$PY" "$HERE/cell.py" $wl 1)
      echo "{\"arm\": \"$arm\", \"src\": \"$src\", \"rep\": $i, \"load\": \"$(cut -d' ' -f1 /proc/loadavg)\", \"r\": $r}" >> "$OUT"
    done
  done
done
