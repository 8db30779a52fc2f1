#!/usr/bin/env bash
# The same as slurm-multinode.sbatch with mpirun and a hostfile (Open MPI shown):
#
#   printf 'node1 slots=4\nnode2 slots=4\n' > hosts
#   HOSTFILE=hosts NPERNODE=4 bash jobs/mpirun-multinode.sh
#
# Ranks are placed node by node (--map-by ppr:N:node), every GPU of a node visible to every
# rank on it, and the environment forwarded (-x). With MPICH: mpiexec -f hosts -ppn 4 -genvall.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTFILE=${HOSTFILE:?set HOSTFILE to a file listing one node per line with its slots}
NPERNODE=${NPERNODE:-4}
NODES=$(grep -cve '^\s*$' "$HOSTFILE")
export NCCL_NVLS_ENABLE=0
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
extra=()
[ "$(id -u)" = 0 ] && extra+=(--allow-run-as-root)
timeout -k 10 1500 mpirun "${extra[@]}" --hostfile "$HOSTFILE" -n $((NODES * NPERNODE)) \
  --map-by "ppr:${NPERNODE}:node" --bind-to none -x NCCL_NVLS_ENABLE -x PYTHONPATH -x PATH \
  python -m mpiring.bench --algo nccl,hier --batches 1,auto --output-dir mpiring-results/multinode
