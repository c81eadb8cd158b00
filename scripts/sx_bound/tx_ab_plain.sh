#!/bin/sh
# scripts/sd_bus/tx_ab.sh without the dispatch's split (SDBUS_PARTS unset): the device's dispatch
# CPU per transaction with no function wrapped (the split's wrappers cost a few us each, and the
# bound path of ltee_bound calls fewer of them than the general one). From the repository's root:
#   sh scripts/sx_bound/tx_ab_plain.sh N OUT WL BATCH LABEL=SRC ...; python scripts/sd_bus/timeline.py OUT/LABEL
n=$1; out=$2; wl=$3; b=$4; shift 4
py=${PY:-/work/main/.venv/bin/python}
hooks=$(cd "$(dirname "$0")/../sd_bus/hooks" && pwd)
i=0
while [ $i -lt "$n" ]; do
  for arm in "$@"; do
    label=${arm%%=*}; src=${arm#*=}
    mkdir -p "$out/$label"
    SDBUS_DIR="$out/$label" PYTHONPATH="$hooks:$src" "$py" scripts/stamp_ltee/cell.py "$wl" "$b" >> "$out/$label.cells" 2>&1
  done
  i=$((i + 1))
done
