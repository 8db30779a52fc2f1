"""Names vulture reports as unused in mpiring/ and tools/ that are kept on purpose, each with why.
CI runs ``vulture mpiring tools .ci/vulture_allow.py --min-confidence 60``: a new unused name
fails it; remove the code, or list it here with its reason."""
# ruff: noqa: B018, F821 - a vulture allowlist is a list of bare names

# -- public API: for users (and the tests that pin it), not called inside the library ----------
replays_kept  # Communicator.replays_kept: how many call shapes replay (mpiring.call.replay)
rail_ranks  # Topology.rail_ranks: the ranks at one place of every node, as a user reads a topology
supported_dtypes  # mpiring.core.ops: the element types this installation can reduce on the host
markdown  # mpiring.core.settings.markdown: renders docs/settings.md's table (a test keeps them equal)
READERS  # mpiring.core.settings: which code reads a variable (the docs' tables are grouped by it)
load_error  # cuda.Probe.load_error: CuPy's import error, shown by `python -m mpiring` and the bench
gpu_call  # RankMismatchError.gpu_call: the GPU-checked call count where ranks disagreed
check_in_board  # CallStats.check_in_board (Communicator.stats()): where the agreement check compares calls
tuning_table  # Communicator.tuning_table: the table auto's choices read, as the call path holds it
disable_gpu_timeouts  # Communicator.disable_gpu_timeouts: the GPU fault tests' control run (no timeouts)

# -- the statement of a rule that kernels or tests check the code against --------------------
direct_flag  # StagingLayout.direct_flag: where a direct kernel's flag lies (test_layout vs csrc)
max_chunk  # RingPlan.max_chunk: what one receive slot must hold (schedule tests check plans by it)
depends_on  # Step.depends_on: the step a fold waits for (the schedule's ordering tests read it)
tolerance  # mpiring.core.ops.tolerance: the error bound of a floating reduction over n ranks (tests)
programs_held  # AllToAllEngine.programs_held: what the program cache holds (tests check its bounds)

# -- a schedule whose GPU body is not written yet (issue 27: the copy-engine two-shot row) ---------
AllToAllPlan  # ring.alltoall_schedule: the all-to-all two-shot's plan, run on a model machine by tests
staging_elements  # AllToAllPlan.staging_elements: staging one rank holds (the row's memory bound)
elements  # alltoall_schedule.Copy/Fold.elements: how many elements an operation moves (the model reads it)

# -- tools.replay_bench's stand-ins, which tests/test_hot_replay.py also drives -----------------
set_watchdog_error  # FakeGpu.set_watchdog_error: a watchdog that found a stuck ring call

# -- the benchmark -------------------------------------------------------------------------------
NcclDirect, MpiDirect, NcclSymm, NcclLib, TorchAllReduce, TorchSymm  # rivals: made by name (rivals' registry)
pending  # bench.command.SignalGuard.pending: the first signal's name (what an interrupted run reports)
check_exact  # bench.data.check_exact: the proof that each value rule is exact (test_bench_data)
sms_held  # bench.overlap.sms_held: the SMs a row holds, the seam a budget is stated through
write_csv, write_json, read_jsonl  # bench.results: the results files' format, both directions
# bench.results.Row's columns, written to and read from the CSV/JSON by field name:
mean_us, gemm_alone_us, gemm_overlap_us, ar_alone_us, ar_overlap_us, overlap_gemms, overlap_calls
t_gemm_us, t_ar_us, overlap_eff, train_gemms, train_calls, train_t_gemm_us, train_t_ar_us
train_t_both_us, train_eff, stated_blocks

# -- mpiring.cuda.streamprog's record fields: _streamprog.c reads the same by the same names --------
STREAM  # field 1: the stream handle
A_BASE  # field 2: the first address's base (FIXED, INPUT, OUTPUT)
A  # field 3: the first address (or its offset)
B_BASE  # field 4: the second address's base, or a value's (SCATTER, GATHER)
B  # field 5: the second address's offset, or a value's offset
C  # field 6: bytes of a copy, a fold's table
D  # field 7: a fold's elements

# -- tools.streamprog_bench's stand-ins, which tests/test_streamprog.py and test_alltoall_engine.py drive
Forwarding  # the compiled executor's driver calls passed on to a simulated GPU
reference_device  # ce-twoshot's Python device over the fake driver
