"""The host status block's words and the errors they report: ``mpiring.cuda.status``.

The direct kernels (oneshot, twoshot, oneshot-ll) and the ring's fold kernels write STATE,
KIND, PEER, SEQ, BLOCK and STEP into pinned host memory when they give up, and the GPU-side
agreement check writes the calls it skipped (ST_MM_*); the host turns the words into the
exception the caller sees, with no CUDA call, so it is tested here on plain words. The
descriptor the kernels compare (:mod:`mpiring.core.descriptor`) is tested here too.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.call.call_check import describe
from mpiring.core import descriptor
from mpiring.core.errors import MpiringTimeoutError, PeerArgumentError, PeerFailedError, RankMismatchError
from mpiring.core.ops import DTYPE_BY_CODE, DTYPES, Op
from mpiring.cuda import contract, sources
from mpiring.cuda.status import (
    ABORT_HINT,
    ABORTED,
    AGREE_STEP,
    BLOCK,
    HEALTHY,
    KIND,
    PEER,
    SEQ,
    STATE,
    STEP,
    TIMED_OUT,
    WORDS,
    skipped_error,
    status_error,
)


def words(state: int, kind: int = 0, peer: int = 0, seq: int = 0, block: int = 0, step: int = 0,
          as_array: bool = True) -> np.ndarray | list[int]:
    """A status block as the kernels leave it (int64 words, like the pinned block's view)."""
    w = [0] * WORDS
    w[STATE], w[KIND], w[PEER], w[SEQ], w[BLOCK], w[STEP] = state, kind, peer, seq, block, step
    return np.array(w, dtype=np.int64) if as_array else w


def test_word_layout_matches_the_kernels_source() -> None:
    """The word indices and STATE values are the ones the CUDA source (csrc/status.cuh) defines
    (tests/test_cuda_contract.py checks every ST_* constant)."""
    text = sources.read("status.cuh")
    defined = {name: int(value) for name, value in re.findall(r"#define ST_(\w+) (\d+)", text)}
    assert {name: defined[name] for name in ("STATE", "KIND", "PEER", "SEQ", "BLOCK", "STEP", "TIMED_OUT",
                                             "ABORTED")} == {
        "STATE": STATE, "KIND": KIND, "PEER": PEER, "SEQ": SEQ, "BLOCK": BLOCK, "STEP": STEP,
        "TIMED_OUT": TIMED_OUT, "ABORTED": ABORTED}
    assert (STATE, KIND, PEER, SEQ, BLOCK, STEP) == (0, 1, 2, 3, 4, 5)
    assert HEALTHY == 0 and WORDS > STEP


def test_import_needs_no_cupy() -> None:
    """mpiring.cuda.status imports (and reports) in a process where CuPy cannot be imported."""
    script = textwrap.dedent("""
        import sys
        sys.modules["cupy"] = None  # any 'import cupy' now raises ImportError
        from mpiring.cuda.status import status_error
        err = status_error([1, 2, 3, 4, 0, 0, 0, 0], 0, 1.0)
        assert "waiting for rank 3" in str(err), err
        assert sys.modules["cupy"] is None, "something replaced the CuPy block"
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("as_array", [True, False])
@pytest.mark.parametrize(
    "fields",
    [{}, {"kind": 2, "peer": 3, "seq": 9, "block": 1, "step": 4}, {"kind": 3, "peer": 1}],
    ids=["zeros", "leftovers", "kind only"],
)
def test_healthy_is_none(fields: dict[str, int], as_array: bool) -> None:
    """STATE healthy: no error, whatever the other words hold."""
    assert status_error(words(HEALTHY, **fields, as_array=as_array), 2, 5.0) is None


@pytest.mark.parametrize(("rank", "peer", "seq", "block", "timeout"),
                         [(0, 1, 17, 0, 0.5), (3, 0, 2**40 + 3, 131, 300.0), (5, 7, 1, 2, 2.25)])
def test_oneshot_timeout(rank: int, peer: int, seq: int, block: int, timeout: float) -> None:
    """A oneshot barrier that timed out: a MpiringTimeoutError naming this rank, the timeout, the peer
    it waited for, the call number and the reporting block; the communicator refuses further use."""
    err = status_error(words(TIMED_OUT, kind=2, peer=peer, seq=seq, block=block), rank, timeout)
    assert type(err) is MpiringTimeoutError
    assert (err.rank, err.timeout, err.peer, err.seq, err.algorithm, err.step) == (
        rank, timeout, peer, seq, "oneshot", "the barrier after the push")
    assert str(err) == (
        f"rank {rank} timed out after {timeout:g} s in the oneshot algorithm, the barrier after the "
        f"push (call {seq}, block {block}), waiting for rank {peer} to reach the same barrier; "
        f"{ABORT_HINT}")


@pytest.mark.parametrize(
    ("step", "text"),
    [
        (0, "barrier 1 of 2 (after the scatter) of chunk 1"),
        (1, "barrier 2 of 2 (after the reduction) of chunk 1"),
        (2, "barrier 1 of 2 (after the scatter) of chunk 2"),
        (3, "barrier 2 of 2 (after the reduction) of chunk 2"),
        (4, "barrier 1 of 2 (after the scatter) of chunk 3"),
        (5, "barrier 2 of 2 (after the reduction) of chunk 3"),
    ],
)
def test_twoshot_timeout_names_the_barrier(step: int, text: str) -> None:
    """Twoshot's STEP counts two barriers per chunk: which one, and of which chunk, is in the error."""
    err = status_error(words(TIMED_OUT, kind=3, peer=2, seq=44, block=7, step=step), 1, 3.0)
    assert type(err) is MpiringTimeoutError
    assert (err.rank, err.peer, err.seq, err.algorithm, err.step) == (1, 2, 44, "twoshot", text)
    message = str(err)
    assert message.startswith(f"rank 1 timed out after 3 s in the twoshot algorithm, {text} "
                              "(call 44, block 7), waiting for rank 2 to reach the same barrier")
    assert message.endswith(ABORT_HINT)


@pytest.mark.parametrize(("kind", "algorithm"), [(2, "oneshot"), (3, "twoshot"), (4, "oneshot-ll")])
def test_a_timeout_in_the_agreement_check_names_the_check_and_the_call(kind: int, algorithm: str) -> None:
    """STEP = AGREE_STEP (agree.cuh's STEP_AGREE): the wait for a peer's call descriptor, not a
    barrier. The error says so, waits for the peer "to reach the same call", and gives the call
    number the kernels count."""
    err = status_error(words(TIMED_OUT, kind=kind, peer=3, seq=12, block=0, step=AGREE_STEP), 1, 2.0)
    assert type(err) is MpiringTimeoutError
    step = "the agreement check (the wait for the peer's call descriptor)"
    assert (err.algorithm, err.step, err.peer, err.seq) == (algorithm, step, 3, 12)
    assert str(err) == (f"rank 1 timed out after 2 s in the {algorithm} algorithm, {step} (call 12, "
                        f"block 0), waiting for rank 3 to reach the same call; {ABORT_HINT}")


@pytest.mark.parametrize(("kind", "algorithm"), [(1, "ring"), (2, "oneshot"), (3, "twoshot"), (9, "unknown")])
@pytest.mark.parametrize(("rank", "peer"), [(0, 3), (2, 0), (1, 1)])
def test_aborted_names_the_aborting_rank(kind: int, algorithm: str, rank: int, peer: int) -> None:
    """STATE aborted: a peer gave up (PEER is the rank that aborted): PeerFailedError, not a timeout."""
    err = status_error(words(ABORTED, kind=kind, peer=peer, seq=5, step=3), rank, 1.0)
    assert type(err) is PeerFailedError
    message = str(err)
    assert message.startswith(f"rank {rank}: rank {peer} aborted this communicator after a timeout of "
                              "its own")
    assert f"seen here in the {algorithm} algorithm" in message
    assert "refuses further use" in message


def test_unknown_kind_times_out_as_unknown() -> None:
    """A KIND the host does not know still gives a timeout, in the 'unknown' algorithm."""
    err = status_error(words(TIMED_OUT, kind=0, peer=4, seq=8), 0, 1.0)
    assert type(err) is MpiringTimeoutError
    assert (err.algorithm, err.peer, err.seq) == ("unknown", 4, 8)
    assert "in the unknown algorithm" in str(err)


FIELDS = st.fixed_dictionaries({
    "count": st.integers(0, (1 << 63) - 1), "dtype": st.sampled_from(sorted(DTYPE_BY_CODE)),
    "op": st.sampled_from([int(op) for op in Op]), "algorithm": st.integers(1, 255),
    "collective": st.integers(1, 3), "memory": st.integers(0, 1), "in_place": st.integers(0, 1),
    "batches": st.integers(0, 1 << 20)})


@given(FIELDS, st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(128, 255)),
       st.sampled_from(sorted(descriptor.KINDS)))
def test_descriptors_round_trip_as_signed_words(values, itemsize, kind) -> None:
    """What pack() writes, unpack() reads back, from the signed words a kernel argument (and
    the status block) holds, also where the top field sets word 1's sign bit (itemsize from
    128); batches saturate at 65535."""
    words = descriptor.pack(values, itemsize, kind)
    assert all(-(1 << 63) <= w < 1 << 63 for w in words)
    back = descriptor.unpack(words)
    assert back == dict(values, batches=min(values["batches"], 0xFFFF), kind=kind, itemsize=itemsize)


def test_descriptor_fields_are_disjoint_and_fill_a_word() -> None:
    bits = [set(range(shift, shift + n)) for _, shift, n in descriptor.WORD1]
    assert sum(len(b) for b in bits) == 64 and set().union(*bits) == set(range(64))


def test_a_descriptor_field_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="dtype"):
        descriptor.pack({"dtype": 256}, 4)
    with pytest.raises(ValueError, match="count"):
        descriptor.pack({"count": -1}, 4)


def _skipped(count: int, peer: int, theirs: tuple[int, int], mine: tuple[int, int],
             kind: int = contract.KIND_ONESHOT_LL, call: int = 7) -> list[int]:
    w = [0] * contract.WORDS
    w[contract.MM_COUNT], w[contract.MM_KIND] = count, kind
    w[contract.MM_PEER], w[contract.MM_CALL] = peer, call
    w[contract.MM_THEIRS:contract.MM_THEIRS + 2] = theirs
    w[contract.MM_MINE:contract.MM_MINE + 2] = mine
    return w


F32, F64 = DTYPES["float32"].code, DTYPES["float64"].code
CALL_VALUES = dict(count=1000, dtype=F32, op=int(Op.SUM), algorithm=10, collective=1, memory=1, batches=0)


def test_a_skipped_call_names_both_ranks_values_once() -> None:
    """A report of a call skipped because a peer's descriptor differed: RankMismatchError naming
    only the fields that differ, by name; raised once (the count it returns is kept)."""
    theirs = descriptor.pack(dict(CALL_VALUES, count=999, dtype=F64), 8)
    w = _skipped(1, 1, theirs, descriptor.pack(CALL_VALUES, 4))
    err, seen = skipped_error(w, 0, 0, describe)
    assert isinstance(err, RankMismatchError) and seen == 1 and err.gpu_call == 7
    text = str(err)
    assert "count (this rank 1000, rank 1 999)" in text
    assert "dtype (this rank float32, rank 1 float64)" in text
    assert "op (" not in text and "algorithm (" not in text  # equal fields are not named
    assert "oneshot-ll kernel" in text and "stays usable" in text and "wrote no output" in text
    assert "calls were skipped" not in text  # one call: no count of others
    assert skipped_error(w, 0, seen, describe) == (None, 1)  # nothing new: nothing raised


def test_a_notice_names_what_the_peer_found() -> None:
    """A notice of a rejected call gives PeerArgumentError naming the rank; one of a host check
    that found a difference names the differing fields (here the algorithm, by name)."""
    mine = descriptor.pack(CALL_VALUES, 4)
    err, _ = skipped_error(_skipped(1, 2, descriptor.pack({}, 0, descriptor.REJECTED), mine), 0, 0, describe)
    assert isinstance(err, PeerArgumentError) and "rank 2 rejected its arguments" in str(err)
    ring = descriptor.pack(dict(CALL_VALUES, algorithm=1), 0, descriptor.DISAGREED)
    err, _ = skipped_error(_skipped(1, 3, ring, mine), 0, 0, describe)
    assert isinstance(err, RankMismatchError)
    assert "algorithm (this rank oneshot-ll, rank 3 ring)" in str(err) and "checks on the host" in str(err)


def test_several_skipped_calls_are_one_error_that_says_so() -> None:
    mine = descriptor.pack(CALL_VALUES, 4)
    theirs = descriptor.pack(dict(CALL_VALUES, op=2), 4)
    err, seen = skipped_error(_skipped(5, 1, theirs, mine), 0, 2, describe)
    assert seen == 5 and "3 calls were skipped" in str(err)
