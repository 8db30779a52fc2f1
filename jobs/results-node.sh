#!/usr/bin/env bash
# The measurements behind results/ and mpiring/data/tuning-h200.json, on one GPU node:
# the tuning table for this rank count, then the full benchmark (eager, every algorithm),
# the small/medium sizes with CUDA graphs (--graph), and the overlap with a GEMM.
# Usage: NGPUS=4 NAME=h200x4 OUTDIR=results bash jobs/results-node.sh
# Env as in gpu-node.sh (MPIRUN, PYTHON, TIMEOUT); TUNING: the tuning file to write or merge into.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off everywhere mpiring runs NCCL
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
NGPUS=${NGPUS:-$(nvidia-smi -L | wc -l)}
MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-python3}
TIMEOUT=${TIMEOUT:-900}
NAME=${NAME:-node${NGPUS}}
OUTDIR=${OUTDIR:-results}
TUNING=${TUNING:-$OUTDIR/tuning.json}
extra=()
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  extra+=(--bind-to none -x NCCL_NVLS_ENABLE -x PYTHONPATH -x MPIRING_TUNING_FILE)
  [ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
fi
run() { timeout -k 10 "$TIMEOUT" "$MPIRUN" "${extra[@]}" -n "$NGPUS" "$PY" "$@"; }
mkdir -p "$OUTDIR"

echo "== tuning table, $NGPUS ranks -> $TUNING"
if [ -f "$TUNING" ]; then run -m mpiring.tune -b 1K -e 1G -f 2 --merge "$TUNING"
else run -m mpiring.tune -b 1K -e 1G -f 2 --output "$TUNING"; fi
export MPIRING_TUNING_FILE=$PWD/$TUNING  # auto below uses the table just measured

echo "== full benchmark"
run -m mpiring.bench --output-dir "$OUTDIR" --name "$NAME"
echo "== CUDA graphs, small and medium messages"
run -m mpiring.bench -b 1K -e 64M -f 4 --graph --algo nccl,oneshot,twoshot,auto \
  --output-dir "$OUTDIR" --name "$NAME-graph"
echo "== overlap with a GEMM"
run -m mpiring.bench -b 16M -e 1G -f 4 --overlap gemm --algo nccl,ring,twoshot,auto \
  --output-dir "$OUTDIR" --name "$NAME-overlap"
