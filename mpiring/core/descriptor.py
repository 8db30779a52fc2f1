"""A call's descriptor as it travels on the GPU: two 64-bit words. Pure: no CuPy.

The GPU-side agreement check (``mpiring/cuda/csrc/agree.cuh``) carries every call's
descriptor in two header lines to every peer; each kernel compares its peers' descriptors with
its own before it writes any output. The same fields as the host check's
(:data:`mpiring.call.agreement.FIELDS`), plus what the GPU needs to know about a peer's call::

    word 0: count
    word 1: dtype | op << 8 | algorithm << 16 | collective << 24 | kind << 32 | memory << 36
            | in_place << 38 | min(batches, 0xFFFF) << 40 | itemsize << 56

``block`` (Reduce_scatter_block's and Allgather's elements per rank) does not travel: with
``count`` (recvbuf's elements), ``collective`` and ``in_place`` it follows from the rank count,
which every rank of a node's staging shares. So two calls that differ in their block differ
in these words too, and the kernels, which compare both words whole, see it.

``kind`` says what the sender runs: ``CALL`` (a kernel of a GPU-checked row, whose own
descriptor this is), or a *notice*, the one-block kernel a rank launches instead when its
call cannot run on the GPU this time and a peer's kernel waits for it: ``REJECTED`` (the
sender rejected its own arguments; the other fields are zero) or ``DISAGREED`` (the sender's
row checks on the host, which found the ranks disagree; the other fields are its call's).
``itemsize`` lets a receiver know how many oneshot-ll lines the sender pushed (to clear them).
The numbers are mirrored in ``csrc/agree.cuh``; ``tests/test_cuda_contract.py`` checks both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

CALL, REJECTED, DISAGREED = 0, 1, 2  # DESC_CALL, DESC_REJECTED, DESC_DISAGREED in agree.cuh
KINDS = {CALL: "call", REJECTED: "rejected", DISAGREED: "disagreed"}

# (field, first bit, bits) of word 1; "count" is all of word 0.
WORD1 = (("dtype", 0, 8), ("op", 8, 8), ("algorithm", 16, 8), ("collective", 24, 8), ("kind", 32, 4),
         ("memory", 36, 2), ("in_place", 38, 2), ("batches", 40, 16), ("itemsize", 56, 8))
_MAX_BATCHES = (1 << 16) - 1

Descriptor = tuple[int, int]  # (word 0, word 1), each as a signed 64-bit int: a kernel's i64 argument


def pack(values: Mapping[str, int], itemsize: int, kind: int = CALL) -> Descriptor:
    """The two words of a call with the agreement check's ``values`` (``count``, ``dtype``,
    ``op``, ``algorithm``, ``collective``, ``memory``, ``in_place``, ``batches``; ``block`` is
    implied: see the module docstring), as signed 64-bit ints.

    ``batches`` saturates at 65535 (a difference above that goes unnoticed on the GPU; the
    rows checked there take no batches)."""
    count = int(values.get("count", 0))
    if not 0 <= count < 1 << 63:
        raise ValueError(f"descriptor count out of range: {count}")
    fields = dict(values, kind=kind, itemsize=itemsize,
                  batches=min(int(values.get("batches", 0)), _MAX_BATCHES))
    word1 = 0
    for name, shift, bits in WORD1:
        v = int(fields.get(name, 0))
        if not 0 <= v < 1 << bits:
            raise ValueError(f"descriptor field {name} out of range: {v}")
        word1 |= v << shift
    return count, _signed(word1)


def unpack(words: Descriptor | Sequence[int]) -> dict[str, int]:
    """The fields of :func:`pack`'s words (signed or not), by name."""
    word0, word1 = (int(w) & ((1 << 64) - 1) for w in words)
    fields = {"count": word0}
    for name, shift, bits in WORD1:
        fields[name] = word1 >> shift & ((1 << bits) - 1)
    return fields


def _signed(word: int) -> int:
    return word - (1 << 64) if word >= 1 << 63 else word
