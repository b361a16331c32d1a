#!/bin/bash
# Interleaved A/B of two compiled copies with benchmarks/tbm_parts.py (tops35, #31):
#   bash benchmarks/tbm_ab.sh TAG BASE MINE PAIRS [SEED]
# runs /tmp/fc-BASE and /tmp/fc-MINE alternately (PAIRS times, MaskBench --sample 100 --seed
# SEED, one process each), writing /tmp/tbm_ab_TAG_{b,m}N.json, then benchmarks/tbm_pairs.py.
tag=$1; b=$2; m=$3; n=$4; seed=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
for i in $(seq 1 "$n"); do
  PYTHONPATH=/tmp/fc-$b nice python "$here/tbm_parts.py" --sample 100 --seed "$seed" \
    --json "/tmp/tbm_ab_${tag}_b$i.json" | grep TBM
  PYTHONPATH=/tmp/fc-$m nice python "$here/tbm_parts.py" --sample 100 --seed "$seed" \
    --json "/tmp/tbm_ab_${tag}_m$i.json" | grep TBM
done
python "$here/tbm_pairs.py" --base /tmp/tbm_ab_"${tag}"_b*.json --mine /tmp/tbm_ab_"${tag}"_m*.json
