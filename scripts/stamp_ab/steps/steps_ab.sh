#!/bin/bash
# per-step spans of W3/W4 batch-1 cells, arms interleaved (eleventh pass): steps_ab.sh N OUTDIR [WL]
# arms (order rotated per repetition): main (/work/main/src), off (this tree, stamp_warm_online false), on (this tree, default);
# then: python scripts/stamp_ab/steps/steps_report.py OUTDIR/<arm>-* per arm
set -e
N=$1; OUT=$2; WL=${3:-W3}; PY=${PY:-/work/main/.venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd); TREE=$(cd "$HERE/../../.." && pwd)
mkdir -p "$OUT"
for i in $(seq 1 "$N"); do
  arms=(main off on); k=$((i % 3))
  for arm in "${arms[@]:$k}" "${arms[@]:0:$k}"; do
    d="$OUT/$arm-$i"; rm -rf "$d"; mkdir -p "$d"
    case $arm in
      main) src=/work/main/src; o='{}';;
      off) src=$TREE/src; o='{"stamp_warm_online": false}';;
      on) src=$TREE/src; o='{}';;
    esac
    PYTHONPATH="$HERE:$src" STSTEP_DIR="$d" "$PY" "$TREE/scripts/stamp_ab/cell.py" "$WL" 1 "$o" > "$d/cell.json"
  done
done
uptime
