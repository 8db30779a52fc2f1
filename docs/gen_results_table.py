"""Print the markdown results table of one committed benchmark CSV (``results/*.csv``).

    python docs/gen_results_table.py results/h200x4.csv
    python docs/gen_results_table.py results/h200x2.csv --sizes 8K,1M,64M,1G --algos nccl,auto,ring

The README and docs/results.md hold this script's output verbatim, each table under a comment
that names the command which printed it; tests/test_docs.py runs those commands again and
fails where a page differs, so a page cannot drift from the committed data.

Output: one caption line (what the CSV and the JSON beside it record: the machine, the code,
the data type and the timing), a blank line, and the table: per size, each algorithm's median
time of the slowest rank and, in brackets, its speed-up over the baseline the run recorded
(above 1: faster than the baseline); ``auto`` also names the row it ran. The fastest row of
each size, ``auto`` aside (it runs one of the others), is in bold. ``n/a``: the algorithm
refused the size. A plain script: the standard library only, no import of mpiring.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

# Column order: the baseline, auto, then mpiring's rows, then the peers and the other baselines.
ORDER = ["nccl-direct", "mpi-direct", "nccl", "mpi", "auto", "auto-reproducible", "oneshot-ll", "oneshot",
         "twoshot", "ring", "ring-events", "hier", "nccl-ring", "nccl-symm", "torch", "torch-symm-1shot",
         "torch-symm-2shot"]
# nccl / mpi: NCCL's and MPI's allreduce through mpiring.Communicator (the committed runs' baseline);
# the direct rows call them with nothing of mpiring on the path (the bench's default baselines).
TITLES = {"nccl": "ncclAllReduce", "mpi": "MPI_Allreduce", "nccl-direct": "ncclAllReduce (direct)",
          "mpi-direct": "MPI_Allreduce (direct)", "auto": "auto (its pick)",
          "auto-reproducible": "auto, reproducible"}
DEFAULT_SIZES = "4K,64K,1M,4M,8M,64M,256M,512M,1G,8G"
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    found = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not found:
        raise SystemExit(f"not a size: {text!r} (use e.g. 4K, 64M, 1G)")
    return int(found.group(1)) * UNITS[found.group(2)]


def size_label(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def time_label(us: float) -> str:
    if us < 100:
        return f"{us:.1f} µs"
    if us < 10_000:
        return f"{us:.0f} µs"
    return f"{us / 1000:.1f} ms"


def caption(path: Path, rows: list[dict[str, str]]) -> str:
    """What the files record: the machine and the code from the JSON beside the CSV, if any."""
    meta: dict = {}
    beside = path.with_suffix(".json")
    if beside.exists():
        meta = json.loads(beside.read_text(encoding="utf-8")).get("metadata", {})
    first = rows[0]
    gpus = ", ".join(meta.get("gpu_names") or []) or "the host"
    ranks = meta.get("world_size") or first.get("nranks", "?")
    code = f"mpiring {meta.get('mpiring', '?')}, " + (
        f"commit {meta['commit']}" if meta.get("commit") else "commit not recorded in the file")
    timing = (meta.get("settings") or {}).get("timing", "eager")
    timing = "CUDA graph replays" if timing == "graph" else "eager calls"
    parts = [f"`{path.as_posix()}`: {ranks} × {gpus}", f"measured {str(meta.get('date', '?'))[:10]}", code]
    if meta.get("nccl"):
        parts.append(f"NCCL {meta['nccl']}")
    parts.append(f"{first['dtype']} {first['op']}, {timing}, median of the slowest rank")
    return "; ".join(parts) + "."


def table(path: Path, sizes: list[int], algos: list[str] | None) -> str:
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f)
                if r.get("collective", "allreduce") in ("", "allreduce")
                and r.get("placement", "out") in ("", "out")
                and r.get("batches", "-") in ("", "-", "auto")]
    if not rows:
        raise SystemExit(f"{path}: no allreduce rows")
    cells: dict[tuple[int, str], dict[str, str]] = {}
    for r in rows:
        key = (int(r["size_bytes"]), r["algo"])
        if key in cells:
            raise SystemExit(f"{path}: two rows for {r['algo']} at {r['size_bytes']} bytes")
        cells[key] = r
    present = {algo for _, algo in cells}
    if algos is None:
        algos = [a for a in ORDER if a in present] + sorted(present - set(ORDER))
    missing = [a for a in algos if a not in present]
    if missing:
        raise SystemExit(f"{path}: no rows of {missing}")
    baseline = rows[0].get("baseline") or algos[0]
    lines = ["| size | " + " | ".join(TITLES.get(a, a) for a in algos) + " |",
             "| --- |" + " --- |" * len(algos)]
    for size in sizes:
        if not any((size, a) in cells for a in algos):
            raise SystemExit(f"{path}: no rows at {size_label(size)}")
        times = {a: float(cells[(size, a)]["time_us"]) for a in algos
                 if (size, a) in cells and cells[(size, a)]["status"] == "ok"}
        others = {a: t for a, t in times.items() if a != "auto"}
        best = min(others, key=others.__getitem__) if others else None
        out = []
        for a in algos:
            r = cells.get((size, a))
            if r is None:
                out.append("–")
                continue
            if r["status"] != "ok":
                out.append("n/a")
                continue
            text = time_label(times[a])
            notes = [] if a == baseline else [f"{float(r['speedup']):.2f}×"]
            if a == "auto" and r.get("resolved"):
                notes.append(r["resolved"])
            if notes:
                text += f" ({', '.join(notes)})"
            out.append(f"**{text}**" if a == best else text)
        lines.append(f"| {size_label(size)} | " + " | ".join(out) + " |")
    return caption(path, rows) + "\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="a benchmark CSV, e.g. results/h200x4.csv")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--algos", help="the columns, in order (default: every algorithm of the CSV)")
    args = parser.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    algos = args.algos.split(",") if args.algos else None
    sys.stdout.write(table(args.csv, sizes, algos) + "\n")


if __name__ == "__main__":
    main()
