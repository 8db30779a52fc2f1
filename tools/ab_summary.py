"""``python -m tools.ab_summary``: an A/B of the benchmark, row by row, from one job's files.

``bash jobs/ab-node.sh BASE [OTHER ...] -- BENCH ARGS`` runs the benchmark on a base commit's
tree, on any other trees named (commits, or ``git archive`` tarballs of variants), and on the
checkout, in alternating rounds (base 1, other 1, new 1, base 2, ...) within one job, so that
machine drift moves every arm alike; its CSVs are ``ab-<arm>-<round>_*.csv`` in one directory:
arm ``base``, the others' names, then ``new`` (the checkout). This prints, per point
(collective, row, dtype, op, placement, size), each round's time of each arm (``time_us``: the
slowest rank's median) and, for every arm but base, arm/base: the ratio of the arms' mean times
(below 1: that arm is faster)::

    python -m tools.ab_summary results/ab [--out results/h200x4-ab-summary.txt]

A point that some arm or round lacks, or that did not run (``status`` not ok), is listed apart
with its statuses; the wrong elements of every ok row are summed per arm (must be 0). Exit 0, or
2 for a directory without the files of a base and a new arm or with arms of different round
counts.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from mpiring.bench.results import Row, read_csv

_FILE = re.compile(r"^ab-([A-Za-z0-9.+]+)-(\d+)_.*\.csv$")

Point = tuple[str, str, str, str, str, int]  # collective, algo, dtype, op, placement, size_bytes


def point(row: Row) -> Point:
    return (row.collective, row.algo, row.dtype, row.op, row.placement, row.size_bytes)


def runs(directory: Path) -> dict[str, list[Path]]:
    """The CSVs of each arm by round number, the arms in order (base, the others by name, new);
    raises ValueError where the arms cannot be compared."""
    found: dict[str, dict[int, Path]] = {}
    for path in sorted(directory.glob("ab-*.csv")):
        if m := _FILE.match(path.name):
            arm, number = m.group(1), int(m.group(2))
            if number in found.setdefault(arm, {}):
                raise ValueError(f"two files of {arm} round {number}: {found[arm][number].name}, {path.name}")
            found[arm][number] = path
    if "base" not in found or "new" not in found:
        raise ValueError(f"{directory} holds no ab-base-*.csv and ab-new-*.csv of jobs/ab-node.sh")
    arms = ["base", *sorted(set(found) - {"base", "new"}), "new"]
    for arm in arms[1:]:
        if sorted(found[arm]) != sorted(found["base"]):
            raise ValueError(f"rounds differ: base {sorted(found['base'])}, {arm} {sorted(found[arm])}")
    return {arm: [found[arm][k] for k in sorted(found[arm])] for arm in arms}


def summarize(files: dict[str, list[Path]]) -> list[str]:
    """The summary's lines: a header, a line per point that every round of every arm timed, the
    points left apart, and each arm's wrong elements."""
    arms = list(files)
    times: dict[str, list[dict[Point, float]]] = {arm: [] for arm in arms}
    apart: dict[Point, list[str]] = {}
    wrong = dict.fromkeys(arms, 0)
    for arm in arms:
        for path in files[arm]:
            timed: dict[Point, float] = {}
            for row in read_csv(path):
                if row.status == "ok" and row.time_us is not None:
                    timed[point(row)] = row.time_us
                    wrong[arm] += row.wrong or 0
                else:
                    apart.setdefault(point(row), []).append(f"{arm} {path.name}: {row.status}")
            times[arm].append(timed)
    every = [set(t) for arm in arms for t in times[arm]]
    common = set.intersection(*every)
    missing = "not timed in every round of " + ("both arms" if len(arms) == 2 else "every arm")
    for p in set.union(*every) - common:
        apart.setdefault(p, []).append(missing)
    rounds = len(files["base"])
    head = " ".join(f"{arm} {k + 1:>2}" for arm in arms for k in range(rounds))
    ratios = [f"{arm}/base" for arm in arms[1:]]
    lines = [f"# {rounds} rounds per arm; us (slowest rank's median); arm/base: the arms' mean times",
             f"{'collective':<15}{'row':<18}{'dtype':<9}{'op':<5}{'place':<6}{'bytes':>12}  {head}  "
             + " ".join(ratios)]
    for p in sorted(common, key=lambda q: (q[0], q[1], q[2], q[3], q[4], q[5])):
        per_arm = {arm: [t[p] for t in times[arm]] for arm in arms}
        cells = " ".join(f"{v:>7.2f}" for arm in arms for v in per_arm[arm])
        base = statistics.fmean(per_arm["base"])
        ratio = " ".join(f"{statistics.fmean(per_arm[arm]) / base:.3f}" for arm in arms[1:])
        lines.append(f"{p[0]:<15}{p[1]:<18}{p[2]:<9}{p[3]:<5}{p[4]:<6}{p[5]:>12}  {cells}  {ratio}")
    for p in sorted(apart, key=lambda q: (q[0], q[1], q[2], q[3], q[4], q[5])):
        lines.append(f"# apart: {' '.join(map(str, p))}: {'; '.join(apart[p])}")
    lines.append("# wrong elements over the ok rows: " + ", ".join(f"{arm} {wrong[arm]}" for arm in arms))
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
