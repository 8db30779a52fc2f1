"""Faults on a communicator across (virtual) nodes, each in its own ``mpiexec`` job under a hard
time limit: the hierarchical allreduce (what ``auto`` runs across nodes) on host arrays, with
nodes meeting only through MPI on their rails. The same rules as tests/faults/test_faults.py:
every survivor raises within the timeout, nothing reports success with wrong data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_launch import run_scenario
from mpi4py import MPI
from test_faults import COUNT, T, correct, timed_out

if MPI.COMM_WORLD.size > 1:  # each test starts its own mpiexec: run them from the serial suite
    pytest.skip("the fault tests launch their own mpiexec jobs", allow_module_level=True)

TWO_BY_TWO = {"MPIRING_VIRTUAL_NODES": "2"}  # 4 ranks: nodes {0, 1} and {2, 3}; rails {0, 2}, {1, 3}


def test_rank_killed_on_one_node_fails_the_other_node_within_the_timeout(tmp_path: Path) -> None:
    """Rank 2 (node 1) is SIGKILLed at its 10th send of call 2. Rank 3 (its node) raises from the
    ring, naming rank 2 by its communicator rank (its place on node 1 is 0); ranks 0 and 1
    (node 0) wait on their rails for node 1 and raise too, within the timeout, and nobody
    reports success. Protection: the rail's MPI_Iallreduce polled under the timeout (a blocking
    MPI_Allreduce would wait for ever for the dead rank's node)."""
    for attempt in range(5):  # MPICH's mpiexec sometimes kills everyone at once: see test_faults.py
        job = run_scenario(tmp_path / str(attempt), "kill", victim=2, ranks=4, auto_cleanup=False,
                           env=TWO_BY_TWO)
        if not (job.elapsed < T and not any(e["call"] == "fault" for r in (0, 1, 3)
                                            for e in job.events(r))):
            break
    assert [e["call"] for e in job.events(2)] == ["warm-up"], job.explain()
    facts = timed_out(job, 3, "fault", "in the ring algorithm", "waiting for rank 2 to free slot")
    assert facts["peer"] == 2, facts
    for r in (0, 1):
        correct(job, r, "warm-up")
        facts = timed_out(job, r, "fault", "the inter-node allreduce on its rail")
        assert facts["output"]["correct"] < COUNT, facts
    assert job.returncode != 0


def test_ranks_disagree_across_nodes(tmp_path: Path) -> None:
    """Rank 3 (node 1) calls with another count, dtype and op: every rank of both nodes raises
    RankMismatchError at once, outputs untouched, and the communicator keeps working.
    Protection: the agreement check runs over the whole communicator, not one node."""
    job = run_scenario(tmp_path, "mismatch", victim=3, ranks=4, env=TWO_BY_TWO)
    for r in range(4):
        for label in ("count", "dtype", "op"):
            facts = job.event(r, label)
            assert facts["outcome"] == "error" and facts["error"] == "RankMismatchError", facts
            assert facts["elapsed"] < T, facts
        correct(job, r, "after")
    assert job.returncode == 0, job.explain()


@pytest.mark.parametrize(("ranks", "layout"), [(4, "2"), (3, "2"), (9, "4,2,3")],
                         ids=["2x2", "2+1", "4+2+3"])
def test_stragglers_on_even_and_uneven_nodes(tmp_path: Path, ranks: int, layout: str) -> None:
    """30 calls of random sizes, dtypes, ops and placements while a random rank sleeps at random
    steps, on even and uneven nodes (uneven: ring allreduce in each node, the leaders'
    allreduce, a broadcast in each node): every result is exact on every rank."""
    job = run_scenario(tmp_path, "straggler", victim=0, ranks=ranks, limit=90.0,
                       env={"MPIRING_VIRTUAL_NODES": layout})
    calls = [e for r in range(ranks) for e in job.events(r) if e["call"].startswith("straggler")]
    assert len(calls) == ranks * 30, job.explain()
    wrong = [e for e in calls if e["outcome"] != "ok" or e["output"]["other"] or e["output"]["untouched"]]
    assert not wrong, wrong[:3]
    assert job.returncode == 0, job.explain()
