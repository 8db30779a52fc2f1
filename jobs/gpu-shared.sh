#!/usr/bin/env bash
# Multi-rank GPU correctness on a machine with fewer GPUs than ranks: N ranks share GPU 0
# (MPIRING_SHARE_GPU=1, a testing mode) under MPS, which lets their kernels run at once (without
# it their contexts time-slice and every cross-rank wait costs milliseconds). Times mean nothing
# here; the NCCL rows are skipped (NCCL refuses two ranks on one GPU).
#   bash jobs/gpu-shared.sh [RANKS...] [-- PYTEST ARGS]     default: 2 3 4 ranks, all of tests/gpu
# Env: as in node-env.sh. Starts an MPS daemon for this job if none runs, and stops it after.
set -euo pipefail
source "$(dirname "$0")/node-env.sh"
ranks=() args=()
while (($#)); do
  if [[ $1 == -- ]]; then shift; args=("$@"); break; fi
  ranks+=("$1"); shift
done
((${#ranks[@]})) || ranks=(2 3 4)
((${#args[@]})) || args=(tests/gpu)
export MPIRING_SHARE_GPU=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mpiring-mps/pipe}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mpiring-mps/log}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
started=0
if ! echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
  nvidia-cuda-mps-control -d && started=1
fi
stop() { ((started)) && echo quit | nvidia-cuda-mps-control || true; }
trap stop EXIT
[[ " ${extra[*]} " == *" -x "* ]] && extra+=(-x MPIRING_SHARE_GPU -x CUDA_VISIBLE_DEVICES -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
[[ " ${extra[*]} " == *" -x "* ]] && extra+=(-x MPIRING_DIRECT_BLOCKS)
for n in "${ranks[@]}"; do
  # oneshot/twoshot meet block b of every rank at flag barriers, so every rank's grid must be
  # resident at once: 2 x 128 blocks of 512 threads fit on one H200; at 3 ranks 3 x 85 did not
  # (a barrier timed out), so above 2 ranks the ranks split 128 blocks (one per SM, whatever
  # the kernels' registers).
  export MPIRING_DIRECT_BLOCKS=${MPIRING_DIRECT_BLOCKS_SHARED:-$(( n > 2 ? 128 / n : 128 ))}
  echo "== GPU tests on $n ranks sharing one GPU (MPS), MPIRING_DIRECT_BLOCKS=$MPIRING_DIRECT_BLOCKS"
  run "$n" "$PY" -m pytest -q -p no:cacheprovider --with-mpi "${args[@]}"
done
