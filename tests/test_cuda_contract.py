"""Host and device agree on the numbers they share: ``mpiring.cuda.contract`` against ``csrc/``.

``struct Ctl`` (``contract.cuh``) pins its size and every field's offset with static_asserts,
which the compiler checks (tests/test_cuda_sources.py); here each asserted number is checked
against the numpy mirror ``CONTROL``, field by field, in both directions. The status block's
``ST_*`` constants of ``status.cuh`` are checked against the Python ones the host reads with,
and ``MAXR`` against the staging layout's ``MAX_RANKS``. Pure text and numpy: no compiler, no GPU.
"""

from __future__ import annotations

import re

from mpiring.core import settings
from mpiring.cuda import contract, direct_kernels, sources, status
from mpiring.cuda.layout import MAX_RANKS, StagingLayout

CONTRACT = sources.read("contract.cuh")
STATUS = sources.read("status.cuh")


def _defines(text: str) -> dict[str, int]:
    return {name: int(value) for name, value in re.findall(r"^#define (\w+) (\d+)\b", text, re.M)}


def test_every_field_offset_is_asserted_and_matches_numpy() -> None:
    """Each static_assert(offsetof(Ctl, X) == N) equals CONTROL's offset of X, and every numpy
    field has exactly one such assert."""
    asserted = re.findall(r"static_assert\(offsetof\(Ctl, (\w+)\) == (\d+)", CONTRACT)
    names = [name for name, _ in asserted]
    assert len(names) == len(set(names)), "a field is asserted twice"
    assert set(names) == set(contract.CONTROL.names)
    for name, offset in asserted:
        assert contract.CONTROL.fields[name][1] == int(offset), name


def test_size_is_asserted_and_matches_numpy() -> None:
    sizes = re.findall(r"static_assert\(sizeof\(Ctl\) == (\d+)", CONTRACT)
    assert sizes == [str(contract.CONTROL.itemsize)]


def test_fields_are_declared_in_numpy_order() -> None:
    """The struct declares its fields in CONTROL's order, so the two read alike side by side."""
    body = CONTRACT[CONTRACT.index("struct Ctl {"):CONTRACT.index("};", CONTRACT.index("struct Ctl {"))]
    declared = []
    for line in body.splitlines()[1:]:
        code = line.split("//")[0].strip().rstrip(";")
        if code:
            declared += [re.match(r"\w+", part.strip().split()[-1]).group(0)
                         for part in code.split(",")]
    assert declared == list(contract.CONTROL.names)


def test_the_table_fits_its_place_in_the_staging() -> None:
    assert contract.CONTROL.itemsize <= StagingLayout.TABLE_BYTES


def test_maxr_is_the_layouts_max_ranks() -> None:
    defined = _defines(CONTRACT)
    assert defined["MAXR"] == contract.MAXR == MAX_RANKS
    assert contract.CONTROL.fields["flags"][0].shape == (MAX_RANKS,)


def test_direct_threads_match_the_launch_bounds() -> None:
    """The launcher's block size is the kernels' __launch_bounds__ (more threads would not launch)."""
    assert _defines(CONTRACT)["DIRECT_THREADS"] == contract.DIRECT_THREADS == direct_kernels.THREADS
    assert sources.read("direct.cu").count("__launch_bounds__(DIRECT_THREADS)") == 2


def test_status_constants_match() -> None:
    """Every ST_* constant of status.cuh equals its Python twin, and none is missing on either side."""
    defined = {name[3:]: value for name, value in _defines(STATUS).items() if name.startswith("ST_")}
    expected = {
        "STATE": contract.STATE, "KIND": contract.KIND, "PEER": contract.PEER, "SEQ": contract.SEQ,
        "BLOCK": contract.BLOCK, "STEP": contract.STEP, "WORDS": contract.WORDS,
        "MM_COUNT": contract.MM_COUNT, "MM_KIND": contract.MM_KIND, "MM_PEER": contract.MM_PEER,
        "MM_CALL": contract.MM_CALL, "MM_THEIRS": contract.MM_THEIRS, "MM_MINE": contract.MM_MINE,
        "HEALTHY": contract.HEALTHY, "TIMED_OUT": contract.TIMED_OUT, "ABORTED": contract.ABORTED,
        "KIND_RING": contract.KIND_RING, "KIND_ONESHOT": contract.KIND_ONESHOT,
        "KIND_TWOSHOT": contract.KIND_TWOSHOT, "KIND_ONESHOT_LL": contract.KIND_ONESHOT_LL,
        "KIND_NOTICE": contract.KIND_NOTICE, "KIND_CE_TWOSHOT": contract.KIND_CE_TWOSHOT,
    }
    assert defined == expected
    # The skipped-call words follow the failure words, and the two-word fields fit.
    assert contract.STEP < contract.MM_COUNT and contract.MM_MINE + 2 == contract.WORDS


def test_the_descriptor_layout_matches_agree_cuh() -> None:
    """agree.cuh reads the algorithm, kind and itemsize fields of mpiring.core.descriptor's word 1 at
    the same bits, knows the same notice kinds, and spells oneshot-ll's code as the row has it."""
    from mpiring.algorithms import get
    from mpiring.core import descriptor

    agree = sources.read("agree.cuh")
    defined = _defines(agree)
    kinds = {"CALL": descriptor.CALL, "REJECTED": descriptor.REJECTED, "DISAGREED": descriptor.DISAGREED}
    assert {k: defined[f"DESC_{k}"] for k in kinds} == kinds
    assert (contract.DESC_CALL, contract.DESC_REJECTED, contract.DESC_DISAGREED) == tuple(kinds.values())
    assert defined["CODE_ONESHOT_LL"] == contract.CODE_ONESHOT_LL == get("oneshot-ll").code
    fields = {name: (shift, bits) for name, shift, bits in descriptor.WORD1}
    for macro, field, mask in (("ALGORITHM", "algorithm", "0xff"), ("KIND", "kind", "0xf"),
                               ("ITEMSIZE", "itemsize", "0xff")):
        shift, bits = fields[field]
        line = re.search(rf"#define DESC_{macro}\(d1\) .*\(d1\) >> (\d+)\) & (0x[0-9a-f]+)", agree)
        assert line is not None, macro
        found = (int(line.group(1)), int(line.group(2), 16))
        assert found == (shift, int(mask, 16)) == (shift, (1 << bits) - 1)


def test_agree_cuh_spells_out_word_1_as_the_descriptor_packs_it() -> None:
    """agree.cuh's "word 1:" line lists descriptor.WORD1 field by field (name, first bit, bits);
    tests/test_status.py checks that the fields fill the word without overlapping."""
    from mpiring.core import descriptor

    line = re.search(r"^// word 1: (.+)$", sources.read("agree.cuh"), re.M)
    assert line is not None
    spelled = [(name, int(shift), int(bits)) for name, shift, bits in
               re.findall(r"(\w+) (\d+):(\d+)", line.group(1))]
    assert spelled == [tuple(f) for f in descriptor.WORD1]


def test_the_descriptor_tells_blocks_and_placements_apart() -> None:
    """Two ranks' Reduce_scatter_block calls that differ only in their block or placement (equal
    recvbuf counts) pack to different words: the kernels, which compare whole words, see it."""
    from mpiring.core import descriptor

    base = {"count": 1200, "dtype": 2, "op": 1, "algorithm": 1, "collective": 2, "memory": 1}
    in_place = descriptor.pack(dict(base, in_place=1, block=400), 4)
    out_of_place = descriptor.pack(dict(base, in_place=0, block=1200), 4)
    assert in_place != out_of_place
    assert descriptor.unpack(in_place)["in_place"] == 1 and descriptor.unpack(out_of_place)["in_place"] == 0


def test_kind_codes_name_their_algorithms() -> None:
    """KINDS (what status_error names) maps each ST_KIND_* code to its algorithm, and status.py
    re-exports the contract's values rather than keeping its own."""
    kinds = {name[8:].lower().replace("_", "-"): value for name, value in _defines(STATUS).items()
             if name.startswith("ST_KIND_")}
    assert {code: name for name, code in kinds.items()} == contract.KINDS == status.KINDS
    assert (status.STATE, status.WORDS, status.ABORTED) == (contract.STATE, contract.WORDS, contract.ABORTED)


def test_kernels_report_with_named_kinds() -> None:
    """Kernels pass ST_KIND_* to report() and barrier(), never a bare number."""
    fold, direct_cu = sources.read("fold.cu"), sources.read("direct.cu")
    assert "ST_KIND_RING" in fold
    assert not re.search(r"barrier\(c, [^,]+, \d", direct_cu)
    # oneshot: its barrier and its agreement check; twoshot: two barriers and two checks (n == 0).
    assert direct_cu.count("ST_KIND_ONESHOT") == 2 and direct_cu.count("ST_KIND_TWOSHOT") == 4
    assert not re.search(r"agree\(c, g, d0, d1, \d", direct_cu + sources.read("oneshot_ll.cu"))


def test_oneshot_ll_threads_and_lines_match_the_kernel() -> None:
    """The launcher's block shape is oneshot_ll's __launch_bounds__, and its lines per thread."""
    defined = _defines(CONTRACT)
    assert (defined["LL_THREADS"], defined["LL_LINES"]) == (contract.LL_THREADS, contract.LL_LINES)
    assert direct_kernels.LL_BLOCK_LINES == contract.LL_THREADS * contract.LL_LINES
    assert sources.read("oneshot_ll.cu").count("__launch_bounds__(LL_THREADS)") == 1


def test_oneshot_ll_line_mapping_is_the_one_tests_model() -> None:
    """tests/test_direct_kernels.py models which lines each thread of a oneshot-ll grid moves;
    the kernel must map them so, in its push loop and in its read loop alike."""
    kernel = re.sub(r"\s+", " ", sources.read("oneshot_ll.cu"))
    assert kernel.count("const long long first = (long long)blockIdx.x * blockDim.x * per_thread + t;") == 1
    assert kernel.count("const long long l = first + (long long)k * blockDim.x; "
                        "if (k >= per_thread || l >= lines) break;") == 2
    assert kernel.count("for (int k = 0; k < LL_LINES; ++k)") == 2


def test_every_grid_fits_the_started_block_count() -> None:
    """agree.cuh counts a launch's started blocks in the low START_BITS bits of ll_state, below
    the calls begun, whose barrier values (direct.cu: call << STEP_BITS) must fit 64 bits: the
    largest grid of every GPU-checked kernel stays below 2^START_BITS."""
    start_bits = _defines(sources.read("agree.cuh"))["START_BITS"]
    assert _defines(sources.read("direct.cu"))["STEP_BITS"] <= start_bits
    direct = next(s for s in settings.TABLE if s.name == "MPIRING_DIRECT_BLOCKS")
    assert direct.high is not None and direct.high < 1 << start_bits
    mib = 1 << 20
    largest = max(StagingLayout(mib, mib, mib, 1, ranks=n).ll_limit for n in range(2, MAX_RANKS + 1))
    assert direct_kernels.ll_shape(largest // 4, 4, block_lines=1).blocks < 1 << start_bits
