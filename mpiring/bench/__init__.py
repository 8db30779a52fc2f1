"""mpiring's allreduce benchmark, next to its baselines, in the manner of nccl-tests.

    mpiexec -n 4 python -m mpiring.bench [options]     # see --help
    python -m mpiring.bench.plot results/run.csv       # re-plot saved results

Modules: cli (options), sizes (size parsing and sweep), data (exact inputs and expected
results), arrays (host/GPU buffers and timers), measure (one point: check, warm-up, timed
repetitions), stats (statistics, algbw/busbw), sweep (what a run holds), runner (the sweep),
rowmaker and summary (its rows and its text), report (console output; plain without rich),
results (rows; CSV, JSON Lines, JSON), files (rank 0's files of a run, whole at every instant),
command (how a run starts and ends: errors, interrupts), metadata (run description: the code's
version and commit, ranks and CPUs), plot (figures), rivals/ (other libraries' allreduce rows:
torch, nccl-symm, ...), tune (the tuner behind ``mpiring-tune``). The manual: docs/bench.md.
One-off experiments live outside the package, in the repository's tools/.
"""
