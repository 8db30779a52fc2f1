#!/usr/bin/env bash
# GPU tests on 2 ranks and on every GPU of this node, then a short correctness-and-speed check
# (every mpiring algorithm beside ncclAllReduce). Run from anywhere:  bash jobs/gpu-node.sh
# Env: NGPUS (default: all GPUs), MPIRUN (default: mpirun), PYTHON (default: python3),
# TIMEOUT per command (default 900 s), OUTDIR for the check's results.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off everywhere mpiring runs NCCL
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
NGPUS=${NGPUS:-$(nvidia-smi -L | wc -l)}
MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-python3}
TIMEOUT=${TIMEOUT:-900}
extra=()
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI"; then
  extra+=(--bind-to none -x NCCL_NVLS_ENABLE -x PYTHONPATH)
  [ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
fi
# timeout: one crashed rank must not leave the others waiting forever.
run() { local n=$1; shift; timeout -k 10 "$TIMEOUT" "$MPIRUN" "${extra[@]}" -n "$n" "$@"; }

echo "== set-up errors (hidden GPUs, shared GPUs): serial, launches its own ranks"
timeout -k 10 "$TIMEOUT" "$PY" -m pytest -q tests/gpu/test_gpu_setup.py
for n in $(printf '%s\n' 2 "$NGPUS" | sort -un); do
  echo "== GPU tests on $n ranks"
  run "$n" "$PY" -m pytest -q --with-mpi tests/gpu
done
echo "== correctness and speed, $NGPUS ranks"
run "$NGPUS" "$PY" -m mpiring.bench -b 1K -e 1G -f 32 --algo nccl,ring,oneshot,twoshot,auto \
  --output-dir "${OUTDIR:-results/check}" --no-plot
