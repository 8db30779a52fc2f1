"""``python -m tools.ab_summary``: an A/B of the benchmark, row by row, from one job's files.

``bash jobs/ab-node.sh BASE -- BENCH ARGS`` runs the benchmark on a base commit's tree and on
the checkout, in alternating rounds (base 1, new 1, base 2, new 2, ...) within one job, so that
machine drift moves both arms alike; its CSVs are ``ab-base-<round>_*.csv`` and
``ab-new-<round>_*.csv`` in one directory. This prints, per point (collective, row, dtype, op,
placement, size), each round's time of each arm (``time_us``: the slowest rank's median) and
new / base, the ratio of the arms' mean times (below 1: the new code is faster)::

    python -m tools.ab_summary results/ab [--out results/h200x4-ab-summary.txt]

A point that one arm or round lacks, or that did not run (``status`` not ok), is listed apart
with its statuses; the wrong elements of every ok row are summed per arm (must be 0). Exit 0, or
2 for a directory without the files of both arms or with arms of different round counts.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from mpiring.bench.results import Row, read_csv

ARMS = ("base", "new")
_FILE = re.compile(r"^ab-(base|new)-(\d+)_.*\.csv$")

Point = tuple[str, str, str, str, str, int]  # collective, algo, dtype, op, placement, size_bytes


def point(row: Row) -> Point:
    return (row.collective, row.algo, row.dtype, row.op, row.placement, row.size_bytes)


def runs(directory: Path) -> dict[str, list[Path]]:
    """The CSVs of each arm, by round number; raises ValueError where the arms cannot be compared."""
    found: dict[str, dict[int, Path]] = {arm: {} for arm in ARMS}
    for path in sorted(directory.glob("ab-*.csv")):
        if m := _FILE.match(path.name):
            arm, number = m.group(1), int(m.group(2))
            if number in found[arm]:
                raise ValueError(f"two files of {arm} round {number}: {found[arm][number].name}, {path.name}")
            found[arm][number] = path
    if not found["base"] or not found["new"]:
        raise ValueError(f"{directory} holds no ab-base-*.csv and ab-new-*.csv of jobs/ab-node.sh")
    if sorted(found["base"]) != sorted(found["new"]):
        raise ValueError(f"rounds differ: base {sorted(found['base'])}, new {sorted(found['new'])}")
    return {arm: [found[arm][k] for k in sorted(found[arm])] for arm in ARMS}


def summarize(files: dict[str, list[Path]]) -> list[str]:
    """The summary's lines: a header, a line per point that every round of both arms timed, the
    points left apart, and each arm's wrong elements."""
    times: dict[str, list[dict[Point, float]]] = {arm: [] for arm in ARMS}
    apart: dict[Point, list[str]] = {}
    wrong = dict.fromkeys(ARMS, 0)
    for arm in ARMS:
        for path in files[arm]:
            timed: dict[Point, float] = {}
            for row in read_csv(path):
                if row.status == "ok" and row.time_us is not None:
                    timed[point(row)] = row.time_us
                    wrong[arm] += row.wrong or 0
                else:
                    apart.setdefault(point(row), []).append(f"{arm} {path.name}: {row.status}")
            times[arm].append(timed)
    every = [set(t) for arm in ARMS for t in times[arm]]
    common = set.intersection(*every)
    for p in set.union(*every) - common:
        apart.setdefault(p, []).append("not timed in every round of both arms")
    rounds = len(files["base"])
    head = " ".join(f"{arm} {k + 1:>2}" for arm in ARMS for k in range(rounds))
    lines = [f"# {rounds} rounds per arm; us (slowest rank's median); new/base: the arms' mean times",
             f"{'collective':<15}{'row':<18}{'dtype':<9}{'op':<5}{'place':<6}{'bytes':>12}  {head}  new/base"]
    for p in sorted(common, key=lambda q: (q[0], q[1], q[2], q[3], q[4], q[5])):
        base = [t[p] for t in times["base"]]
        new = [t[p] for t in times["new"]]
        cells = " ".join(f"{v:>7.2f}" for v in base + new)
        lines.append(f"{p[0]:<15}{p[1]:<18}{p[2]:<9}{p[3]:<5}{p[4]:<6}{p[5]:>12}  {cells}  "
                     f"{statistics.fmean(new) / statistics.fmean(base):.3f}")
    for p in sorted(apart, key=lambda q: (q[0], q[1], q[2], q[3], q[4], q[5])):
        lines.append(f"# apart: {' '.join(map(str, p))}: {'; '.join(apart[p])}")
    lines.append(f"# wrong elements over the ok rows: base {wrong['base']}, new {wrong['new']}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ab_summary",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("directory", help="where jobs/ab-node.sh wrote its CSVs")
    parser.add_argument("--out", help="also write the summary to this file")
    args = parser.parse_args(argv)
    try:
        lines = summarize(runs(Path(args.directory)))
    except (ValueError, OSError) as exc:
        print(f"python -m tools.ab_summary: {exc}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
