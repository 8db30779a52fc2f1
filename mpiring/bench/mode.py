"""GPU or host: what a run benchmarks, decided alike on every rank before anything is set up.

``--host`` benchmarks host arrays; ``--gpu`` needs every rank to have a usable GPU; by default
(``auto``) a run uses GPUs when every rank can, and benchmarks the host only on a machine that
shows no GPU at all. A machine with visible GPUs (``/dev/nvidia<N>``, or ``nvidia-smi -L``;
see :func:`mpiring.cuda.visible_gpus`) whose CuPy cannot use them is an error that quotes
CuPy's own error, not a quiet host run: a broken install must not pass for a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import cuda

AUTO, GPU, HOST = "auto", "gpu", "host"


class ModeError(Exception):
    """The run cannot benchmark what was asked (raised alike on every rank)."""


@dataclass(frozen=True)
class RankProbe:
    """One rank's view: a usable GPU, or why not, and evidence of GPUs CuPy cannot use."""

    usable: bool
    reason: str = ""
    visible: str = ""


@dataclass(frozen=True)
class Mode:
    """The decision: ``gpu`` or host arrays; for a host run, ``reason`` says why ("--host was
    given", "this machine shows no GPU (...)")."""

    gpu: bool
    reason: str = ""

    @property
    def note(self) -> str:
        """The banner's sentence for a host run ("" for a GPU run)."""
        return f"{self.reason}: benchmarking the host transport against MPI.Allreduce" \
            if not self.gpu else ""


def probe_this_rank() -> RankProbe:
    """This rank's GPU status (CuPy imported once per process) and, without a usable GPU,
    the evidence of GPUs that CuPy could not use."""
    if cuda.available():
        return RankProbe(True)
    return RankProbe(False, cuda.unavailable_reason(), cuda.visible_gpus())


def decide(wanted: str, probes: Sequence[RankProbe]) -> Mode:
    """Pure: the mode for ``wanted`` ("auto", "gpu" or "host") given every rank's probe (in
    rank order); raises :class:`ModeError` naming the ranks and the reason."""
    if wanted == HOST:
        return Mode(False, "--host was given")
    bad = [(rank, p) for rank, p in enumerate(probes) if not p.usable]
    if not bad:
        return Mode(True)
    rank, first = bad[0]
    where = _ranks(r for r, _ in bad)
    if wanted == GPU:
        cause = first.reason if len(bad) == 1 else f"rank {rank}: {first.reason}"
        raise ModeError(f"--gpu: {where} cannot use a GPU: {cause}")
    seen = [(r, p) for r, p in enumerate(probes) if p.visible or p.usable]
    if seen:
        # quote a rank that shows GPUs but cannot use them: its error is the one to fix
        rank, first = next(((r, p) for r, p in bad if p.visible), (rank, first))
        r, witness = seen[0]
        evidence = witness.visible or "CuPy uses its GPU"
        raise ModeError(
            f"this machine has GPUs (rank {r}: {evidence}) but {where} cannot use them: "
            f"rank {rank}: {first.reason}. Fix the installation, or pass --host to benchmark "
            "the host transport on purpose")
    return Mode(False, f"no GPU ({first.reason})")


def _ranks(ranks: Any) -> str:
    listed = list(ranks)
    return f"rank {listed[0]}" if len(listed) == 1 else "ranks " + ", ".join(map(str, listed))


def choose(wanted: str, world: Any, probe: Callable[[], RankProbe] | None = None) -> Mode:
    """Collective over ``world``: every rank probes (unless ``--host``; ``probe`` defaults to
    :func:`probe_this_rank`), all decide alike."""
    if wanted == HOST:
        return decide(HOST, [])
    return decide(wanted, world.allgather((probe or probe_this_rank)()))


def check_algorithms(wanted: Sequence[str] | None, gpu: bool, runnable: Sequence[str],
                     reason: str) -> None:
    """Raise :class:`ModeError` when an algorithm asked for with ``--algo`` cannot reduce the
    run's memory (``nccl`` in a host run, ``mpi`` in a GPU run): asking for it is a mistake
    to report, not a row to skip."""
    wrong = [a for a in (wanted or ()) if a not in runnable]
    if not wrong:
        return
    if gpu:
        raise ModeError(f"--algo {','.join(wrong)}: reduces host arrays only, and this run "
                        f"benchmarks GPU arrays ({', '.join(runnable)}); add --host to benchmark "
                        "the host transport")
    raise ModeError(f"--algo {','.join(wrong)}: reduces GPU arrays only, and this run benchmarks "
                    f"host arrays ({reason or 'no GPU'}); on the host choose from "
                    f"{', '.join(runnable)}")
