"""``python -m tools.board_wait``: run as users run it, under ``mpiexec`` on 2 and 3 ranks, it
prints one line per wait with one figure per rank, each a positive time."""

from __future__ import annotations

import pytest

CASES = ("waiter", "spin", "spin+sync", "yield-only", "sync-only", "mpi")


@pytest.mark.parametrize("ranks", [2, 3])
def test_every_wait_is_timed_on_every_rank(tool, ranks: int) -> None:
    done = tool("board_wait", ["--calls", "200", "--rounds", "2"], ranks=ranks)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"# board barrier, {ranks} ranks"), done.stdout
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:] if line.strip()}
    assert sorted(rows) == sorted(CASES), done.stdout
    for name, figures in rows.items():
        assert len(figures) == ranks and all(float(f) > 0 for f in figures), (name, figures)
