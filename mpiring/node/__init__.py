"""Layer 2, ``node``: the ranks of a communicator and what they share without the GPU — bounded
set-up steps and rendezvous, node shared-memory counters and waits, the control board, failure
notices, MPI groups, the timeout policy. Imports ``core`` only."""
