"""Thin a CUDA shared library (e.g. NCCL's ``libnccl.so.2``) to the device code of one GPU
architecture, so that it can be carried where files are limited in size.

A library built for many GPUs holds, in its ELF sections ``.nv_fatbin`` and ``__nv_relfatbin``,
one *fat binary container* after another; each container holds entries, each a PTX text or a
cubin for one architecture (``sm_90`` is 90). The driver loads the entry that matches the GPU
and never reads the others. This tool overwrites with zeros the payload of every entry whose
architecture is not the one kept, leaving every header, offset and size as it was, and the
kept entries byte for byte; with ``--strip-debug`` it also drops the debug sections
(``objcopy --strip-debug``). The zeros compress to almost nothing: NCCL 2.32.3's 328 MiB file,
thinned to sm_90 and stripped, packs (``xz``) into a few tens of MiB.

The result is the same library on a GPU of the kept architecture: its host code and the kept
device code are unchanged (``--check`` compares every kept payload with the original's). On a
GPU of another architecture it fails at its first kernel. Benchmarks of such a file must say so.

Usage::

    python -m tools.thin_fatbin libnccl.so.2 thin/libnccl.so.2 --arch 90 --strip-debug --check

Container layout (little-endian; as parsed by public fat binary readers, and checked here: a
container's entries must add up to its size exactly, or the tool refuses the file)::

    container: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size of the entries
    entry:     u16 kind (1 PTX, 2 cubin), u16 version, u32 header size, u64 payload size,
               ... u32 architecture at byte 28 of the entry header ...
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0xBA55ED50
FAT_SECTIONS = (".nv_fatbin", "__nv_relfatbin")
CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, entries' size
ENTRY = struct.Struct("<HHIQ")  # kind, version, header size, payload size
ARCH_AT = 28  # byte offset of the architecture in an entry's header
ENTRY_HEADER_MIN = ARCH_AT + 4


@dataclass(frozen=True)
class Entry:
    """One PTX or cubin entry: where its payload lies in the file, and for which GPU."""

    section: str
    kind: int
    arch: int
    payload: int  # file offset
    size: int


def sections(data: bytes | bytearray) -> dict[str, tuple[int, int]]:
    """The ELF64 file's sections by name: (file offset, size)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    table = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = table[shstrndx][4]
    found = {}
    for name, _type, _flags, _addr, offset, size in table:
        start = names_at + name
        found[bytes(data[start:data.index(b"\0", start)]).decode()] = (offset, size)
    return found


def entries(data: bytes | bytearray, section: str, offset: int, size: int) -> Iterator[Entry]:
    """Every entry of every container in ``data[offset:offset + size]``. Containers are 8-byte
    aligned and may be separated by padding; an entry list that does not end exactly at its
    container's end raises (the layout is not the one this tool knows)."""
    end, at = offset + size, offset
    while at + CONTAINER.size <= end:
        magic, _version, header, length = CONTAINER.unpack_from(data, at)
        if magic != MAGIC:
            at += 8
            continue
        entry, stop = at + header, at + header + length
        if stop > end:
            raise ValueError(f"{section}: a container at {at:#x} runs past the section's end")
        while entry < stop:
            kind, _v, entry_header, payload = ENTRY.unpack_from(data, entry)
            if entry_header < ENTRY_HEADER_MIN or entry + entry_header + payload > stop:
                raise ValueError(f"{section}: an entry at {entry:#x} does not fit its container")
            arch, = struct.unpack_from("<I", data, entry + ARCH_AT)
            yield Entry(section, kind, arch, entry + entry_header, payload)
            entry += entry_header + payload
        if entry != stop:
            raise ValueError(f"{section}: the entries of the container at {at:#x} overrun it")
        at = stop


def fat_entries(data: bytes | bytearray) -> list[Entry]:
    """Every entry of the file's fat binary sections."""
    found = sections(data)
    out: list[Entry] = []
    for name in FAT_SECTIONS:
        if name in found:
            out.extend(entries(data, name, *found[name]))
    if not out:
        raise ValueError(f"no fat binary entries in the sections {', '.join(FAT_SECTIONS)}")
    return out


def thin(data: bytearray, arch: int) -> Counter[tuple[str, int]]:
    """Zero, in place, the payload of every entry not for ``arch``; returns the bytes zeroed per
    (section, architecture). Refuses a file with no entry for ``arch``."""
    found = fat_entries(data)
    if not any(e.arch == arch for e in found):
        archs = sorted({e.arch for e in found})
        raise ValueError(f"no device code for sm_{arch} in the file (it has {archs})")
    zeroed: Counter[tuple[str, int]] = Counter()
    for e in found:
        if e.arch != arch:
            data[e.payload:e.payload + e.size] = bytes(e.size)
            zeroed[(e.section, e.arch)] += e.size
    return zeroed


def check(original: bytes, thinned: bytes, arch: int) -> int:
    """The kept entries, payload for payload, equal in both files (after debug stripping, which
    moves sections, the entries are matched in order); returns how many were compared."""
    old = [e for e in fat_entries(original) if e.arch == arch]
    new = [e for e in fat_entries(thinned) if e.arch == arch]
    if len(old) != len(new):
        raise ValueError(f"{len(old)} sm_{arch} entries before, {len(new)} after")
    for a, b in zip(old, new, strict=True):
        if (a.kind, a.size) != (b.kind, b.size) or \
                original[a.payload:a.payload + a.size] != thinned[b.payload:b.payload + b.size]:
            raise ValueError(f"an sm_{arch} entry of {a.section} differs after thinning")
    return len(old)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.thin_fatbin", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--arch", type=int, default=90, help="the architecture kept (default 90: H100/H200)")
    parser.add_argument("--strip-debug", action="store_true", help="also drop the debug sections (objcopy)")
    parser.add_argument("--check", action="store_true", help="compare every kept entry with the source's")
    args = parser.parse_args(argv)
    data = bytearray(args.source.read_bytes())
    zeroed = thin(data, args.arch)
    args.target.parent.mkdir(parents=True, exist_ok=True)
    args.target.write_bytes(data)
    if args.strip_debug:
        objcopy = shutil.which("objcopy")
        if objcopy is None:
            raise SystemExit("--strip-debug needs objcopy (binutils)")
        subprocess.run([objcopy, "--strip-debug", str(args.target)], check=True)
    for (section, arch), size in sorted(zeroed.items()):
        print(f"zeroed {size / 2**20:7.1f} MiB of sm_{arch} code in {section}")
    if args.check:
        print(f"checked: {check(args.source.read_bytes(), args.target.read_bytes(), args.arch)} "
              f"sm_{args.arch} entries equal to the source's")
    print(f"wrote {args.target} ({args.target.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
