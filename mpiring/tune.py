"""``python -m mpiring.tune``: measure this machine and write the tuning table that
``algorithm="auto"`` then uses here by itself. One rank per GPU, on one node::

    mpiexec -n 2 python -m mpiring.tune           # measure, write, print the path
    mpiexec -n 2 python -m mpiring.tune --show    # which table auto uses here (measures nothing)
    mpiexec -n 2 python -m mpiring.tune --overlap # also: what hides best beside a GEMM

It measures every candidate of auto (:func:`mpiring.algorithms.auto_candidates`) at every
size twice, as eager calls and replayed from a CUDA graph, and keeps the fastest at each size
for each kind of call. ``--overlap`` (GPUs) measures them a third time, beside a GEMM on
another stream, and keeps the one with the smallest makespan (``T_both`` of ``python -m
mpiring.bench --overlap gemm``): the entries auto uses for calls made with ``overlap=True``,
where what hides best need not be what is fastest alone. The command is
:mod:`mpiring.bench.tune`, which documents the details and the options; this entry point only
changes where the table goes by default.

Where the table goes: ``<dir>/<gpu>-<ranks>x-<link>.json``, named for this machine's
:class:`~mpiring.machine.MachineKey` (e.g. ``nvidia-h200-2x-nvlink.json``), where ``<dir>`` is

* ``$MPIRING_TUNING_DIR`` if set, else
* ``${XDG_CACHE_HOME:-~/.cache}/mpiring/tuning``.

The command prints the path. A communicator on a node of the same key then uses it, unless
``MPIRING_TUNING_FILE`` names a table that holds this machine (lookup order:
:mod:`mpiring.tuning`); ``comm.tuning.describe()`` says which table is in force. The ranks of a
node must all find the same file (set-up checks it: same ``MPIRING_TUNING_DIR``,
``XDG_CACHE_HOME`` and ``HOME`` on every rank). ``-o FILE`` writes elsewhere, ``--merge FILE``
adds this rank count's table to an existing file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tuner with this user's table for this machine as the default destination."""
    from .bench.tune import main as tune_main

    return tune_main(argv, prog="python -m mpiring.tune", per_user=True)


if __name__ == "__main__":
    sys.exit(main())
