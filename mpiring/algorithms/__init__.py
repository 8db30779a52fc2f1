"""The algorithm table: every allreduce mpiring can run, one :class:`Algorithm` row each.

    ring         both   one node   the copy-engine ring (ring.py)
    ring-events  GPU    one node   the same ring signalled by interprocess events (ring_events.py)
    oneshot      GPU    one node   one-kernel, latency (direct.py)
    twoshot      GPU    one node   one-kernel, bandwidth (direct.py)
    oneshot-ll   GPU    one node   one-kernel, no barrier, flags in the data (direct.py)
    ce-twoshot   GPU    one node   all-to-all two-shot on copy engines, one fold kernel (ce_twoshot.py)
    nccl         GPU    any        ncclAllReduce (nccl.py)
    nccl-ring    GPU    any        send/recv ring baseline (nccl.py)
    mpi          host   any        MPI.Allreduce (mpi.py)
    mpi-twoshot  host   any        shards to owners, reduced in rank order, all-gather (mpi_twoshot.py)
    hier         both   any        ring in each node, NCCL/MPI between nodes (hier.py)

plus ``auto``, which is no row: it picks a row per message size (:mod:`mpiring.auto`), and ``hier``
wherever the communicator spans nodes. Rows with ``reduce_scatter``/``allgather`` entries
serve ``Reduce_scatter_block``/``Allgather`` too. Everything
that lists, codes, checks or dispatches algorithms reads this table through the functions
below; :func:`register` adds a row at run time (every rank must register the same rows).
"""

from __future__ import annotations

from array import array

from ..core.buffers import Memory
from ..core.errors import InvalidArgumentError
from . import ce_twoshot, direct, hier, mpi, mpi_twoshot, nccl, ring, ring_events
from .base import BOTH, GPU, HOST, Algorithm, Call, CallShape, Collective, Scope, SmWork

AUTO = "auto"

_TABLE: dict[str, Algorithm] = {}
# Bumped by every change of the table: what memos of its answers key on. An int64 word, so
# that the compiled call table (mpiring.call.hot_replay) reads it at every call (version_word).
_VERSION = array("q", [0])


def register(algorithm: Algorithm) -> Algorithm:
    """Add a row (every rank, before creating communicators that use it). Names and wire codes
    must be new."""
    if algorithm.name in _TABLE or algorithm.name == AUTO:
        raise ValueError(f"an algorithm named {algorithm.name!r} exists already")
    if any(a.code == algorithm.code for a in _TABLE.values()):
        raise ValueError(f"wire code {algorithm.code} of {algorithm.name!r} is taken")
    _TABLE[algorithm.name] = algorithm
    _VERSION[0] += 1
    return algorithm


def unregister(name: str) -> None:
    """Remove a row added by :func:`register` (tests)."""
    _TABLE.pop(name, None)
    _VERSION[0] += 1


def version() -> int:
    """A number that changes whenever a row is added or removed."""
    return _VERSION[0]


def version_word() -> tuple[int, array]:
    """The address of the int64 word :func:`version` reads, and its owner (keep it alive; its
    ``[0]`` is :func:`version`, read without a call)."""
    return _VERSION.buffer_info()[0], _VERSION


for _row in (ring.ROW, ring_events.ROW, direct.ONESHOT, direct.TWOSHOT, direct.ONESHOT_LL, ce_twoshot.ROW,
             nccl.NCCL, nccl.NCCL_RING, mpi.ROW, hier.ROW, mpi_twoshot.ROW):
    register(_row)


def rows() -> tuple[Algorithm, ...]:
    """Every row, in table order."""
    return tuple(_TABLE.values())


def names(memory: Memory | None = None, *, with_auto: bool = True,
          collective: Collective = Collective.ALLREDUCE) -> tuple[str, ...]:
    """Every name users may pass for ``collective`` (``auto`` last), or those serving ``memory``."""
    out = tuple(a.name for a in _TABLE.values()
                if (memory is None or a.serves(memory)) and a.runner(collective) is not None)
    return out + ((AUTO,) if with_auto else ())


def get(name: str, *, source: str = "") -> Algorithm:
    """The row called ``name``; ``source`` names where the name came from, in the error."""
    try:
        return _TABLE[name]
    except KeyError:
        where = f" (from {source})" if source else ""
        raise InvalidArgumentError(
            f"unknown algorithm {name!r}{where}: choose one of {', '.join(names())}") from None


def check_name(name: object, *, source: str = "") -> str:
    """``name`` lower-cased if it is a row's name or ``auto``; raise naming the choices otherwise."""
    text = str(name).lower()
    if text != AUTO:
        get(text, source=source)
    return text


def by_code(code: int) -> Algorithm | None:
    return next((a for a in _TABLE.values() if a.code == code), None)


def name_of_code(code: int) -> str:
    """The name behind a wire code (for error messages)."""
    row = by_code(code)
    return row.name if row is not None else f"algorithm code {code}"


def auto_candidates(memory: Memory = Memory.CUDA) -> tuple[str, ...]:
    """What ``auto`` may pick for ``memory``, in table order."""
    return tuple(a.name for a in _TABLE.values() if a.auto and a.serves(memory))


def rank_ordered(memory: Memory) -> tuple[str, ...]:
    """The rows of ``reproducible=True`` for ``memory``: those that reduce in rank order
    (:mod:`mpiring.core.reproducible`), in table order."""
    return tuple(a.name for a in _TABLE.values() if a.rank_ordered and a.serves(memory))


AUTO_SUMMARY = ("on one node: per message size from a tuning table measured on the machine (rows "
                "marked auto; see below); across nodes: `hier`")
_SHORT = {Collective.ALLREDUCE: "AR", Collective.REDUCE_SCATTER: "RS", Collective.ALLGATHER: "AG"}


def markdown_table() -> str:
    """The README's table of algorithms, rendered from the rows (a test keeps them in step).
    Collectives: AR allreduce, RS ``Reduce_scatter_block``, AG ``Allgather``."""
    lines = ["| `algorithm=` | memory | nodes | collectives | what | best for | batched | CUDA graph "
             "| auto picks it |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
             f"| `{AUTO}` (default) | GPU and host | any | AR RS AG | {AUTO_SUMMARY} | everything | | | |"]
    for a in _TABLE.values():
        graph = "yes" if a.graph_capturable else ("no" if a.serves(Memory.CUDA) else "")
        nodes = "any" if a.scope is Scope.ANY else "one"
        kinds = " ".join(_SHORT[c] for c in a.collectives())
        lines.append(f"| `{a.name}` | {a.describe_memory()} | {nodes} | {kinds} | {a.summary} | "
                     f"{a.best_for} | {'yes' if a.batched else ''} | {graph} | {'yes' if a.auto else ''} |")
    return "\n".join(lines) + "\n"


__all__ = ["AUTO", "BOTH", "GPU", "HOST", "Algorithm", "Call", "CallShape", "Collective", "Scope", "SmWork",
           "auto_candidates", "by_code", "check_name", "get", "markdown_table", "name_of_code", "names",
           "rank_ordered", "register", "rows", "unregister", "version"]
