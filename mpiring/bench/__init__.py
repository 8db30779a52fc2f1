"""mpiring's allreduce benchmark, next to its baselines, in the manner of nccl-tests.

    mpiexec -n 4 python -m mpiring.bench [options]     # see --help
    python -m mpiring.bench.plot results/run.csv       # re-plot saved results

Modules: cli (options), sizes (size parsing and sweep), data (exact inputs and expected
results), arrays (host/GPU buffers and timers), measure (one point: check, warm-up, timed
repetitions), stats (statistics, algbw/busbw), runner (the sweep), report (console output),
results (CSV/JSON), metadata (run description), plot (figures).
"""
