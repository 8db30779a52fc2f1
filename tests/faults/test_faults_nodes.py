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
    """Rank 2 (node 1) dies at its 10th send of call 2 (scripts/fault.py, ``kill``). Rank 3 (its
    node) raises from the ring, naming rank 2 by its communicator rank (its place on node 1 is
    0); ranks 0 and 1 (node 0) wait on their rails for node 1 and raise too, within the timeout
    (their own rail timeout, or rank 3's timeout relayed by its notice across nodes), and nobody
    reports success. Protection: the rail's MPI_Iallreduce polled under the timeout (a blocking
    MPI_Allreduce would wait for ever for the dead rank's node). Deterministic (issue 25, item 3):
    the victim exits rather than die of a signal (hydra SIGKILLed every rank whenever it reaped
    a signalled one first), and no survivor touches MPI again before every survivor recorded."""
    job = run_scenario(tmp_path, "kill", victim=2, ranks=4, auto_cleanup=False, env=TWO_BY_TWO)
    assert [e["call"] for e in job.events(2)] == ["warm-up"], job.explain()
    ring, rail = "in the ring algorithm", "the inter-node allreduce on its rail"
    # Each survivor times out itself, or (the notice across nodes, a node mate's mark) raises
    # first with a peer's timeout: whichever expires first, by the ranks' clocks.
    facts = timed_out(job, 3, "fault")
    if facts["error"] == "MpiringTimeoutError":
        assert ring in facts["message"] and "waiting for rank 2 to" in facts["message"], facts
        assert facts["peer"] == 2, facts
    else:
        assert rail in facts["message"], facts  # node 0's timeout: rank 3's came later
    for r in (0, 1):
        correct(job, r, "warm-up")
        facts = timed_out(job, r, "fault")
        if facts["error"] == "MpiringTimeoutError":
            assert rail in facts["message"], facts
        else:
            assert any(w in facts["message"] for w in (ring, rail)), facts
        assert facts["output"]["correct"] < COUNT, facts
    assert job.returncode != 0


QUICK = 2.0  # seconds a peer may take to raise after a rank failed, with a 60 s timeout


@pytest.mark.parametrize(("ranks", "layout"), [(4, "2"), (3, "2,1")], ids=["2x2", "2+1"])
def test_a_rank_failing_mid_call_stops_the_other_node_at_once(tmp_path: Path, ranks: int,
                                                               layout: str) -> None:
    """Rank 1 (node 0) fails inside the hierarchical allreduce (its 5th fold raises): rank 0 (its
    node) and the ranks of node 1 (waiting on their rails; uneven: rank 2 in the leaders'
    allreduce) raise PeerFailedError naming rank 1 and its error within QUICK seconds, not after
    the 60 s timeout, and nobody reports success. Protection: the failure notice across nodes
    (mpiring.node.notice); before it, node 1's ranks waited for the whole timeout (issue 25, item 7).
    In a fault job of its own: the rails' abandoned MPI_Iallreduce would stay pending in a
    test process (on some ranks only), and with it their communicators' context ids."""
    job = run_scenario(tmp_path, "fold-raise", victim=1, ranks=ranks, timeout=60.0, limit=45.0,
                       auto_cleanup=False, env={"MPIRING_VIRTUAL_NODES": layout})
    victim = job.event(1, "fault")
    assert victim["outcome"] == "error" and victim["error"] == "RuntimeError", job.explain()
    for r in [0, *range(2, ranks)]:
        facts = job.event(r, "fault")
        assert facts["outcome"] == "error" and facts["error"] == "PeerFailedError", job.explain()
        assert facts["message"].startswith(f"rank {r}: rank "), facts["message"]
        assert "rank 1 failed with RuntimeError: injected fold failure on rank 1" in facts["message"], facts
        assert facts["elapsed"] < QUICK, f"rank {r} raised after {facts['elapsed']:.2f} s"
        assert facts["output"]["correct"] < COUNT, facts  # never a success
        assert facts["input_intact"], facts


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
