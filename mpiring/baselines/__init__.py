"""Baselines mpiring is measured against: NCCL's allreduce and a ring of NCCL send/recv."""
