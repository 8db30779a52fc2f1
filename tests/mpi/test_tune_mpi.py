"""python -m mpiring.bench.tune on real ranks (host transport): the table file is written once, by
rank 0, parses with mpiring.algorithms.auto.load, and --merge keeps other rank counts' tables.

Run:  mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_tune_mpi.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mpi4py import MPI

from mpiring.algorithms import auto as tuning
from mpiring.bench import tune

pytestmark = pytest.mark.mpi(min_size=1)

world = MPI.COMM_WORLD
TINY = ["--host", "-b", "1K", "-e", "8K", "-f", "4", "--time-budget", "0.003", "--reps", "2",
        "--progress", "off"]


def verdict(problems: list[str]) -> None:
    """Fail on every rank if any rank found a problem."""
    lines = [f"rank {r}: {p}" for r, ps in enumerate(world.allgather(problems)) for p in ps]
    if lines:
        pytest.fail("\n".join(lines), pytrace=False)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """Rank 0's temporary directory, the same path on every rank."""
    return Path(world.bcast(str(tmp_path) if world.rank == 0 else None, root=0))


def test_tune_writes_a_table_auto_can_load(shared):
    path = shared / "tuning.json"
    status = tune.main([*TINY, "--output", str(path)])
    world.Barrier()
    problems = [] if status == 0 else [f"exit status {status}"]
    table = tuning.load(path)
    if table.tables != {world.size: ((None, "ring"),)}:
        problems.append(f"tables {table.tables}")
    run = table.meta.get("runs", {}).get(str(world.size), {})
    if run.get("mode") != "host" or not run.get("machine") or not table.measured:
        problems.append(f"metadata {table.meta}")
    if table.choose(world.size, 12345) != "ring":
        problems.append("auto would not pick ring")
    verdict(problems)


def test_merge_adds_this_rank_count(shared):
    path = shared / "both.json"
    other = world.size + 1
    if world.rank == 0:
        path.write_text('{"format": 1, "machine": "elsewhere", "measured": "", "tables": '
                        f'{{"{other}": [[4096, "oneshot"], [null, "ring"]]}}}}\n')
    world.Barrier()
    status = tune.main([*TINY, "--merge", str(path)])
    world.Barrier()
    table = tuning.load(path)
    problems = [] if status == 0 else [f"exit status {status}"]
    if table.tables != {other: ((4096, "oneshot"), (None, "ring")), world.size: ((None, "ring"),)}:
        problems.append(f"tables {table.tables}")
    verdict(problems)


def test_missing_merge_file_stops_before_measuring(shared, capsys):
    status = tune.main([*TINY, "--merge", str(shared / "absent.json")])
    problems = [] if status == 3 else [f"exit status {status}"]
    if world.rank == 0 and "no such file" not in capsys.readouterr().err:
        problems.append("no message naming the missing file")
    verdict(problems)
