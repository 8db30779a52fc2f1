"""mpiring's allreduce benchmark, next to its baselines, in the manner of nccl-tests.

    mpiexec -n 4 python -m mpiring.bench [options]     # see --help
    python -m mpiring.bench.plot results/run.csv       # re-plot saved results

Modules: cli (options), sizes (size parsing and sweep), data (exact inputs and expected
results), arrays (host/GPU buffers and timers), measure (one point: check, warm-up, timed
repetitions), stats (statistics, algbw/busbw), runner (the sweep), report (console output),
results (rows; CSV, JSON Lines, JSON), files (rank 0's files of a run, whole at every instant),
command (how a run starts and ends: errors, interrupts), metadata (run description: the code's
version and commit, ranks and CPUs), plot (figures). The manual: docs/bench.md.
"""
