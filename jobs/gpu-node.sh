#!/usr/bin/env bash
# GPU tests (set-up errors, faults, then the whole suite on every GPU of this node and on 2 ranks,
# with the 10,000-call stress and 1,000 create/close cycles), then a short correctness-and-speed check
# (every GPU row of the algorithm table, and auto, beside ncclAllReduce). Run from anywhere:  bash jobs/gpu-node.sh
# Env: as in node-env.sh, OUTDIR for the check's results, FUZZ_SECONDS for the GPU fuzz test
# (default 60; 300 for a release run).
set -euo pipefail
source "$(dirname "$0")/node-env.sh"

echo "== the compiled replay (mpiring/call/_hotpath.c; without it replays run in Python)"
"$PY" -m tools.build_hotpath --check || echo "(not built: the replays run in Python)"

echo "== set-up errors, faults (hidden GPUs, shared GPUs, killed/stopped/skipping ranks) and the 2x2 hier job: serial, each starts its own ranks"
timeout -k 10 "$TIMEOUT" "$PY" -m pytest -q tests/gpu/test_gpu_setup.py tests/gpu/test_gpu_faults.py \
  tests/gpu/test_gpu_hier_jobs.py
for n in $(printf '%s\n' "$NGPUS" 2 | uniq); do
  echo "== GPU tests on $n ranks"
  run "$n" "$PY" -m pytest -q --with-mpi tests/gpu --fuzz-seconds "${FUZZ_SECONDS:-60}"
done
echo "== correctness and speed, $NGPUS ranks"
run "$NGPUS" "$PY" -m mpiring.bench -b 1K -e 1G -f 32 --progress off \
  --output-dir "${OUTDIR:-results/check}" --no-plot
