# Sourced by the node scripts: environment and an mpirun wrapper for one GPU node.
# Env: NGPUS (default: all GPUs), MPIRUN (default: mpirun), PYTHON (default: python3),
# TIMEOUT per command (default 900 s).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off everywhere mpiring runs NCCL
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # ... and torch / NVSHMEM
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
NGPUS=${NGPUS:-$(nvidia-smi -L | wc -l)}
MPIRUN=${MPIRUN:-mpirun}
PY=${PYTHON:-python3}
TIMEOUT=${TIMEOUT:-900}
extra=()
# Read the whole banner first: `mpirun --version | grep -q` can fail under pipefail when grep
# exits early and mpirun dies of SIGPIPE, which would silently drop the Open MPI flags below.
mpirun_banner=$("$MPIRUN" --version 2>&1 || true)
if [[ $mpirun_banner == *"Open MPI"* ]]; then
  extra+=(--bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS
          -x PYTHONPATH)
  [ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
fi
# timeout: one crashed rank must not leave the others waiting forever.
run() { local n=$1; shift; timeout -k 10 "$TIMEOUT" "$MPIRUN" "${extra[@]}" -n "$n" "$@"; }
