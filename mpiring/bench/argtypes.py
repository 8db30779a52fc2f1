"""Argument types and the rank-0 parser shared by ``mpiring.bench`` and ``mpiring.bench.tune``.

Parsing is pure and identical on every rank; only rank 0 prints help and errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from .nccl_names import OPS, op_name, type_name
from .sizes import parse_size


def launch_rank() -> int:
    """This process's rank: MPI's where MPI is initialised, else the launcher's (``PMI_RANK``,
    ``OMPI_COMM_WORLD_RANK``, ...), else 0. Cheap, and never initialises MPI (option parsing
    runs before it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return int(mpi.COMM_WORLD.Get_rank())
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


class RankZeroParser(argparse.ArgumentParser):
    """An argument parser that prints on rank 0 only (every rank parses the same argv)."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if launch_rank() == 0:
            super()._print_message(message, file)


def _typed(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError becomes argparse's clean error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


size_arg = _typed(parse_size)
"""An argparse type: a message size such as 4096, 64K, 8G."""

dtype_arg = _typed(type_name)
"""An argparse type: an element type by nccl-tests' or numpy's name, as numpy's name."""

op_arg = _typed(op_name)
"""An argparse type: a reduction by nccl-tests' name (sum, prod, max, min)."""


def int_at_least(lowest: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``lowest``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be at least {lowest}, got {value}")
        return value
    return parse


def int_in(choices: dict[int, str], what: str) -> Callable[[str], int]:
    """An argparse type: one of the integers of ``choices`` (value -> meaning)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value not in choices:
            listed = ", ".join(f"{k} {v}" for k, v in choices.items())
            raise argparse.ArgumentTypeError(f"{what} must be one of {listed}; got {text!r}")
        return value
    return parse


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)


def positive_float(text: str) -> float:
    """An argparse type: a number greater than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def choices_list(allowed: tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma list of ``allowed`` names, in order, without repeats."""
    def parse(text: str) -> tuple[str, ...]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty {what} list")
        for item in items:
            if item not in allowed:
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {item!r}: choose from {', '.join(allowed)}")
        return tuple(dict.fromkeys(items))
    return parse


def batches_list(text: str) -> tuple[int | str, ...]:
    """An argparse type: a comma list of mini-batch counts and/or ``auto``."""
    out: list[int | str] = []
    for item in (t.strip().lower() for t in text.split(",")):
        if not item:
            continue
        if item == "auto":
            out.append("auto")
            continue
        try:
            value = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"batches {item!r} is neither a positive integer nor 'auto'") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"batches must be at least 1, got {value}")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError("empty batches list")
    return tuple(dict.fromkeys(out))


__all__ = ["OPS", "RankZeroParser", "batches_list", "choices_list", "dtype_arg", "int_at_least",
           "int_in", "launch_rank", "nonneg_int", "op_arg", "positive_float", "positive_int",
           "size_arg"]
