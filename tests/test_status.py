"""The host status block's words and the error they report: ``mpiring.cuda.status.status_error``.

The direct kernels (oneshot, twoshot) and the ring's fold kernels write STATE, KIND, PEER, SEQ,
BLOCK and STEP into eight words of pinned host memory; the host turns them into the exception
the caller sees, with no CUDA call, so it is tested here on plain words.
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

from mpiring.cuda import contract, sources
from mpiring.cuda.direct import LL_BLOCK_LINES, ll_blocks, ll_descriptor, split_descriptor
from mpiring.cuda.status import (
    ABORT_HINT,
    ABORTED,
    BLOCK,
    HEALTHY,
    KIND,
    PEER,
    SEQ,
    STATE,
    STEP,
    TIMED_OUT,
    WORDS,
    status_error,
)
from mpiring.errors import MpiringTimeoutError, PeerFailedError, RankMismatchError
from mpiring.ops import DTYPE_BY_CODE, DTYPES, Op


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
    it waited for, the barrier's seq and the reporting block; the communicator refuses further use."""
    err = status_error(words(TIMED_OUT, kind=2, peer=peer, seq=seq, block=block), rank, timeout)
    assert type(err) is MpiringTimeoutError
    assert (err.rank, err.timeout, err.peer, err.seq, err.algorithm, err.step) == (
        rank, timeout, peer, seq, "oneshot", "the barrier after the push")
    assert str(err) == (
        f"rank {rank} timed out after {timeout:g} s in the oneshot algorithm, the barrier after the "
        f"push (barrier seq {seq}, block {block}), waiting for rank {peer} to reach the same barrier; "
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
                              "(barrier seq 44, block 7), waiting for rank 2 to reach the same barrier")
    assert message.endswith(ABORT_HINT)


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


@given(st.integers(0, (1 << 32) - 1), st.sampled_from(sorted(DTYPE_BY_CODE)), st.sampled_from(list(Op)))
def test_oneshot_ll_descriptors_round_trip(count, dtype, op) -> None:
    desc = ll_descriptor(count, dtype, int(op), 10, 1)
    assert 0 <= desc < 1 << 64
    assert split_descriptor(desc) == dict(count=count, dtype=dtype, op=int(op), algorithm=10, collective=1)
    assert split_descriptor(desc - (1 << 64) if desc >= 1 << 63 else desc) == split_descriptor(desc)


def test_a_descriptor_field_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError):
        ll_descriptor(1 << 32, 1, 1, 10, 1)
    with pytest.raises(ValueError):
        ll_descriptor(1, 256, 1, 10, 1)


def test_a_mismatch_report_names_both_ranks_values() -> None:
    words = [0] * contract.WORDS
    words[contract.STATE], words[contract.KIND], words[contract.PEER] = (
        contract.MISMATCH, contract.KIND_ONESHOT_LL, 1)
    f32, f64 = DTYPES["float32"].code, DTYPES["float64"].code
    words[contract.MINE] = ll_descriptor(1000, f32, int(Op.SUM), 10, 1)
    theirs = ll_descriptor(999, f64, int(Op.SUM), 10, 1)
    words[contract.THEIRS] = theirs - (1 << 64) if theirs >= 1 << 63 else theirs  # as read back: signed
    err = status_error(words, 0, 5.0)
    assert isinstance(err, RankMismatchError)
    text = str(err)
    assert "count (this rank 1000, rank 1 999)" in text
    assert "dtype (this rank float32, rank 1 float64)" in text
    assert "op" not in text.split("found on the GPU")[1].split(".")[0]  # equal fields are not named
    assert "oneshot-ll" in text and "refuses further use" in text


@given(st.integers(1, 1 << 20), st.sampled_from([1, 2, 4, 8]))
def test_oneshot_ll_grid_covers_every_line_with_no_idle_block(count, itemsize) -> None:
    blocks = ll_blocks(count, itemsize)
    lines = -(-count * itemsize // 8)
    assert (blocks - 1) * LL_BLOCK_LINES < max(lines, 1) <= blocks * LL_BLOCK_LINES
