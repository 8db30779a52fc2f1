"""``tools.thin_fatbin`` on small ELF files written here: the payload of every entry of another
architecture becomes zeros and nothing else moves; the kept entries stay byte for byte; files
without the kept architecture, or whose containers do not add up, are refused."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import thin_fatbin
from tools.thin_fatbin import MAGIC, check, fat_entries, thin

ENTRY_HEADER = 64  # as NCCL's entries have them (the tool reads only the first 32 bytes)


def entry(kind: int, arch: int, payload: bytes) -> bytes:
    header = bytearray(ENTRY_HEADER)
    struct.pack_into("<HHIQ", header, 0, kind, 0x101, ENTRY_HEADER, len(payload))
    struct.pack_into("<I", header, 28, arch)
    header[40:48] = b"\xee" * 8  # a field the tool must leave alone
    return bytes(header) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body


def elf(sections: dict[str, bytes]) -> bytes:
    """A 64-bit little-endian ELF file of these sections (no program headers: enough for the tool)."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    blobs = [*sections.values(), names]
    offsets, at = [], 64
    for blob in blobs:
        at = (at + 15) // 16 * 16
        offsets.append(at)
        at += len(blob)
    shoff = (at + 7) // 8 * 8
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, len(blobs) + 1, len(blobs))
    out = bytearray(shoff)
    out[:64] = head
    for off, blob in zip(offsets, blobs, strict=True):
        out[off:off + len(blob)] = blob
    table = bytearray(64)  # the null section
    name_at = 1
    for i, (off, blob) in enumerate(zip(offsets, blobs, strict=True)):
        table += struct.pack("<IIQQQQ", name_at, 1, 0, 0, off, len(blob)) + bytes(24)
        name_at += len([*sections, ".shstrtab"][i]) + 1
    return bytes(out + table)


def library() -> bytes:
    fat = container(entry(2, 80, b"A" * 40), entry(2, 90, b"B" * 24), entry(1, 120, b"P" * 8))
    fat += bytes(8)  # padding between containers
    fat += container(entry(2, 90, b"C" * 16), entry(2, 100, b"D" * 32))
    rel = container(entry(2, 75, b"E" * 8), entry(2, 90, b"F" * 8))
    return elf({".text": b"\x90" * 100, ".nv_fatbin": fat, "__nv_relfatbin": rel})


def test_other_architectures_become_zeros_and_nothing_else_moves() -> None:
    original = library()
    data = bytearray(original)
    zeroed = thin(data, 90)
    assert zeroed == {(".nv_fatbin", 80): 40, (".nv_fatbin", 120): 8, (".nv_fatbin", 100): 32,
                      ("__nv_relfatbin", 75): 8}
    kept = [e for e in fat_entries(data) if e.arch == 90]
    assert [bytes(data[e.payload:e.payload + e.size]) for e in kept] == [b"B" * 24, b"C" * 16, b"F" * 8]
    changed = [i for i in range(len(data)) if data[i] != original[i]]
    dropped = [e for e in fat_entries(original) if e.arch != 90]
    assert changed == [i for e in dropped for i in range(e.payload, e.payload + e.size)]
    assert all(data[i] == 0 for i in changed)
    assert check(original, bytes(data), 90) == 3


def test_check_notices_a_changed_kept_entry() -> None:
    original = library()
    data = bytearray(original)
    thin(data, 90)
    kept = next(e for e in fat_entries(data) if e.arch == 90)
    data[kept.payload] ^= 1
    with pytest.raises(ValueError, match="sm_90 entry of .nv_fatbin differs"):
        check(original, bytes(data), 90)


def test_a_file_without_the_architecture_is_refused() -> None:
    has = r"\(it has \[75, 80, 90, 100, 120\]\)"
    with pytest.raises(ValueError, match=r"no device code for sm_86 in the file " + has):
        thin(bytearray(library()), 86)


def test_a_container_whose_entries_overrun_it_is_refused() -> None:
    bad = bytearray(container(entry(2, 90, b"B" * 24)))
    struct.pack_into("<Q", bad, 8, 24)  # the container claims less than its entry needs
    with pytest.raises(ValueError, match="does not fit its container"):
        fat_entries(elf({".nv_fatbin": bytes(bad) + bytes(64)}))


def test_not_an_elf_file_is_refused() -> None:
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF file"):
        fat_entries(b"MZ" + bytes(100))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from([75, 80, 90, 100]),
                          st.binary(min_size=0, max_size=40)), min_size=1, max_size=8))
def test_any_entry_list_keeps_exactly_the_kept_architecture(items) -> None:
    items = [*items, (2, 90, b"k")]  # at least one kept entry
    original = elf({".nv_fatbin": container(*(entry(k, a, p) for k, a, p in items))})
    data = bytearray(original)
    thin(data, 90)
    found = fat_entries(data)
    assert [(e.kind, e.arch, e.size) for e in found] == [(k, a, len(p)) for k, a, p in items]
    for e, (_k, a, p) in zip(found, items, strict=True):
        assert bytes(data[e.payload:e.payload + e.size]) == (p if a == 90 else bytes(len(p)))


def test_the_command_writes_the_thinned_file(tmp_path: Path, capsys) -> None:
    source, target = tmp_path / "lib.so", tmp_path / "out" / "lib.so"
    source.write_bytes(library())
    assert thin_fatbin.main([str(source), str(target), "--arch", "90", "--check"]) == 0
    printed = capsys.readouterr().out
    assert "zeroed     0.0 MiB of sm_80 code in .nv_fatbin" in printed
    assert "checked: 3 sm_90 entries equal to the source's" in printed
    assert target.read_bytes() != source.read_bytes()
    assert check(source.read_bytes(), target.read_bytes(), 90) == 3
