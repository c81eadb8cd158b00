#!/bin/sh
# interleaved per-transaction timelines of stamp cells (docs/protocols/stamp.md "Twelfth pass"):
#   sh scripts/sd_bus/tx_ab.sh N OUT WL BATCH LABEL=SRC ...   (run from the repository's root)
# per repetition each arm in turn: one scripts/stamp_ltee/cell.py with scripts/sd_bus/hooks on the path
# and SDBUS_DIR=OUT/LABEL (SDBUS_PARTS=1: the device's dispatch split too); then
#   python scripts/sd_bus/timeline.py OUT/LABEL ; python scripts/sd_bus/parts.py OUT/LABEL
n=$1; out=$2; wl=$3; b=$4; shift 4
py=${PY:-/work/main/.venv/bin/python}
here=$(cd "$(dirname "$0")" && pwd)
i=0
while [ $i -lt "$n" ]; do
  for arm in "$@"; do
    label=${arm%%=*}; src=${arm#*=}
    mkdir -p "$out/$label"
    SDBUS_PARTS=1 SDBUS_DIR="$out/$label" PYTHONPATH="$here/hooks:$src" "$py" scripts/stamp_ltee/cell.py "$wl" "$b" >> "$out/$label.cells" 2>&1
  done
  i=$((i + 1))
done
