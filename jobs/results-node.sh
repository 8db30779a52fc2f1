#!/usr/bin/env bash
# The measurements behind results/ and mpiring/data/tuning-h200.json, on one GPU node:
# the tuning table for this rank count, then the full benchmark (eager, every algorithm),
# the small/medium sizes with CUDA graphs (--graph), the overlap with a GEMM (both workload
# shapes, without and with an SM budget), the ring's timeline, the host time per eager call,
# and tools.starve.
# Usage: NGPUS=4 NAME=h200x4 OUTDIR=results bash jobs/results-node.sh
# Env as in node-env.sh; TUNING: the tuning file to write or merge into; SM_BUDGET: the
# --sm-budget of the second overlap run (default 16).
set -euo pipefail
source "$(dirname "$0")/node-env.sh"
NAME=${NAME:-node${NGPUS}}
OUTDIR=${OUTDIR:-results}
TUNING=${TUNING:-$OUTDIR/tuning.json}
SM_BUDGET=${SM_BUDGET:-16}
mkdir -p "$OUTDIR"

echo "== tuning table (eager, graph and overlap entries), $NGPUS ranks -> $TUNING"
if [ -f "$TUNING" ]; then run "$NGPUS" "$PY" -m mpiring.bench.tune -b 1K -e 1G -f 2 --overlap --merge "$TUNING"
else run "$NGPUS" "$PY" -m mpiring.bench.tune -b 1K -e 1G -f 2 --overlap --output "$TUNING"; fi
export MPIRING_TUNING_FILE=$PWD/$TUNING  # auto below uses the table just measured
[ ${#extra[@]} -gt 0 ] && extra+=(-x MPIRING_TUNING_FILE)  # Open MPI passes only what it is told

echo "== full benchmark"
run "$NGPUS" "$PY" -m mpiring.bench --output-dir "$OUTDIR" --name "$NAME"
echo "== CUDA graphs, small and medium messages"
run "$NGPUS" "$PY" -m mpiring.bench -b 1K -e 64M -f 4 --graph --algo nccl,oneshot,twoshot,auto \
  --output-dir "$OUTDIR" --name "$NAME-graph"
echo "== overlap with GEMMs: the makespan, both shapes, every algorithm and NCCL"
run "$NGPUS" "$PY" -m mpiring.bench -b 16M -e 1G -f 4 --overlap gemm,train \
  --algo nccl,ring,ring-events,twoshot,auto --output-dir "$OUTDIR" --name "$NAME-overlap"
echo "== the same with an SM budget of $SM_BUDGET (the GEMMs planned for the other SMs)"
run "$NGPUS" "$PY" -m mpiring.bench -b 16M -e 1G -f 4 --overlap gemm,train --sm-budget "$SM_BUDGET" \
  --algo nccl,ring,ring-events,twoshot,auto --output-dir "$OUTDIR" --name "$NAME-overlap-sm$SM_BUDGET"
echo "== the ring's timeline (where a call's time goes), alone and beside 8192^2 GEMMs (with a"
echo "   budget: the GEMMs planned for the SMs it leaves)"
for size in 64M 1G; do
  run "$NGPUS" "$PY" -m tools.timeline -b "$size" --calls 20 --gemm 8192 \
    --json "$OUTDIR/$NAME-timeline-$size.json" | tee "$OUTDIR/$NAME-timeline-$size.txt"
  run "$NGPUS" "$PY" -m tools.timeline -b "$size" --calls 20 --gemm 8192 \
    --sm-budget "$SM_BUDGET" \
    --json "$OUTDIR/$NAME-timeline-$size-sm$SM_BUDGET.json" | tee "$OUTDIR/$NAME-timeline-$size-sm$SM_BUDGET.txt"
done
echo "== host time per eager call (CuPy arrays and torch tensors)"
run "$NGPUS" "$PY" -m tools.enqueue -b 8K --torch | tee "$OUTDIR/$NAME-enqueue.txt"
echo "== a fold, and a whole call's folds (per chunk, or one persistent launch), beside a GEMM (GPU 0)"
timeout -k 10 "$TIMEOUT" "$PY" -m tools.starve --json "$OUTDIR/$NAME-starve.json" \
  | tee "$OUTDIR/$NAME-starve.txt"
