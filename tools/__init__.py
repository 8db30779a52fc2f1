"""One-off experiments and maintenance commands beside mpiring: not part of the package (the
wheel holds ``mpiring*`` only), run from a checkout, each as a module from the repository root::

    python -m tools.enqueue [...]       # host time of one eager call, per algorithm (mpiexec too)
    python -m tools.host_anatomy [...]  # where a replayed GPU call's host time goes, piece by piece
    python -m tools.board_wait [...]    # one barrier through the node's control board (mpiexec)
    python -m tools.timeline [...]      # where a ring or ce-twoshot call's time goes (a GEMM beside)
    python -m tools.starve [...]        # how long a fold-sized kernel waits for SMs beside a GEMM
    python -m tools.scaleout [...]      # the scale-out cost model against measured results
    python -m tools.shipped [--check]   # derive mpiring/data/tuning-h200.json from results/
    python -m tools.targets [CSV ...]   # issue 28's small-message targets, per results CSV
    python -m tools.soak_faults [...]   # the fault tests 20 times in a row beside 2 other MPI jobs
    python -m tools.ce_patterns [...]   # copy engines: a ring step, an all-to-all phase, a fold
    python -m tools.barrier_cost [...]  # one barrier of the direct kernels, by its parts (fence, flag)
    python -m tools.kernel_resources [...]  # registers, stack and spills of a kernel source (no GPU)
    python -m tools.ab_summary DIR      # an A/B of the benchmark (jobs/ab-node.sh), row by row
    python -m tools.build_hotpath       # compile the C extensions (eager replay, stream programs)
    python -m tools.replay_bench [...]  # ns per replayed call, compiled and Python, no GPU
    python -m tools.streamprog_bench [...]  # µs per ce-twoshot round, compiled and Python, no GPU
    python -m tools.thin_fatbin [...]   # a CUDA library cut to one GPU's code (NCCL to carry)

(``starve_calls`` is part of ``starve``; ``kernels`` holds the CUDA sources of ``csrc/`` that
``enqueue``, ``starve``, ``ce_patterns`` and ``barrier_cost`` launch; ``launch_floor`` builds
``csrc/launch_floor.c`` at run time: a bound launch made with one C call, ``enqueue``'s floor.)
They use mpiring's public modules and the benchmark's (``mpiring.bench``); nothing in ``mpiring``
imports them. Their tests are in ``tests/tools``.
"""
