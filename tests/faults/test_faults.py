"""Faults on the host transport, each in its own ``mpiexec`` job under a hard time limit, so that
no fault can hang the test run: a rank that raises, disagrees, skips a call, dies, stops or
straggles, and a rank that never joins set-up. Collected by the serial ``pytest tests`` run.

"Never wrong data", as checked here (inputs are exact integers, outputs start as a poison no
reduction can produce):

* a call that returns has the exact result, bitwise, on every rank that returns;
* a call that fails before any transfer (disagreement, agreement or set-up timeout) leaves the
  output untouched;
* a call that fails mid-pipeline leaves the output undefined (the ring reduces into it step by
  step, so it may hold partial sums), never reports success, never writes the input, and
  nothing writes the output after the call raised;
* every surviving rank that cannot complete raises within the timeout (plus scheduling slack).

Each test's docstring names the protection it covers; without it the test fails (a hang
reaches the hard limit, or the checks above see wrong data).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_launch import Job, run_scenario
from mpi4py import MPI

if MPI.COMM_WORLD.size > 1:  # each test starts its own mpiexec: run them from the serial suite
    pytest.skip("the fault tests launch their own mpiexec jobs", allow_module_level=True)

COUNT = 50_000  # as in scripts/fault.py
T = 1.0  # MPIRING_TIMEOUT of the jobs
SLACK = 2.5  # scheduling slack on 2 cores


def timed_out(job: Job, rank: int, label: str, *fragments: str) -> dict:
    """Rank ``rank``'s call ``label`` raised MpiringTimeoutError within the timeout, saying
    ``fragments``; or PeerFailedError relaying the MpiringTimeoutError of a peer that timed out
    first (its failure mark stops this rank's waits), which then says ``fragments``."""
    facts = dict(job.event(rank, label))
    if facts.get("error") == "PeerFailedError":  # a peer timed out first: its mark stopped this rank
        assert facts["message"].startswith(f"rank {rank}: rank "), facts["message"]
        assert "failed with MpiringTimeoutError" in facts["message"], facts["message"]
        first = [f for r in job.records for f in job.events(r)
                 if f["call"] == label and f.get("error") == "MpiringTimeoutError"]
        assert first, f"no rank timed out itself\n{job.explain()}"
        # The relay comes once a peer's own timeout expired by its clock; the ranks enter the
        # call up to a scheduling delay apart, so on this rank's clock it may come earlier.
        assert any(f["elapsed"] >= T for f in first), f"no rank waited the timeout\n{job.explain()}"
        facts.update({k: first[0].get(k) for k in ("peer", "step", "seq", "algorithm")})
        earliest = 0.0
    else:
        assert facts["outcome"] == "error" and facts["error"] == "MpiringTimeoutError", job.explain()
        assert facts["message"].startswith(f"rank {rank} timed out after {T:g} s"), facts["message"]
        earliest = T  # its own timeout never expires early
    assert earliest <= facts["elapsed"] < T + SLACK, f"rank {rank} raised after {facts['elapsed']:.2f} s"
    for fragment in fragments:
        assert fragment in facts["message"], facts["message"]
    assert facts["input_intact"], f"rank {rank}: the input was written"
    return facts


def untouched(facts: dict) -> None:
    assert facts["output"] == {"correct": 0, "untouched": COUNT, "other": 0}, facts


def closed_at_once(job: Job, rank: int, outcome: str = "ok") -> None:
    close = job.records[rank]["close"]
    assert close["outcome"].startswith(outcome), close
    assert close["elapsed"] < 0.5, f"rank {rank}: close took {close['elapsed']:.2f} s"


def correct(job: Job, rank: int, label: str) -> None:
    facts = job.event(rank, label)
    assert facts["outcome"] == "ok" and facts["output"]["correct"] == COUNT, facts


def test_rank_raises_before_the_collective(tmp_path: Path) -> None:
    """Rank 1 raises before its second call (plain ``python``, so nothing aborts the job): ranks
    0 and 2 raise MpiringTimeoutError from the agreement check, naming rank 1 as missing, with
    their outputs untouched, and the job ends. Protection: the bounded agreement check (a
    polled Iallreduce); with a blocking MPI_Allreduce they would wait for ever."""
    job = run_scenario(tmp_path, "raise", victim=1)
    assert "injected failure on rank 1" in job.records[1].get("exception", ""), job.explain()
    for r in (0, 2):
        correct(job, r, "warm-up")
        facts = timed_out(job, r, "fault", "in the agreement check of call 2 (algorithm ring), waiting for "
                          "every rank to enter the agreement check of call 2: 1 of 3 ranks did not call "
                          "allreduce (rank 1 is at call 1)")
        assert (facts["peer"], facts["step"], facts["seq"]) == (1, "agreement check", 2), facts
        untouched(facts)
        closed_at_once(job, r)
    assert job.returncode != 0


def test_python_m_mpi4py_aborts_the_job(tmp_path: Path) -> None:
    """The same fault under ``python -m mpi4py``: the unhandled exception calls MPI_Abort, and the
    job ends at once, long before any timeout (60 s here; the bound is the job's wall time,
    start-up included, as in test_rank_killed_under_default_mpiexec). Covers the README's
    advice, not a protection of mpiring: it fails if ``-m mpi4py`` stops aborting."""
    job = run_scenario(tmp_path, "raise", victim=1, timeout=60.0, limit=90.0, abort_on_error=True)
    assert "injected failure on rank 1" in job.output, job.explain()
    assert job.returncode != 0
    assert job.elapsed < 30.0, f"the job took {job.elapsed:.1f} s"
    assert not any(e["call"] == "fault" for r in (0, 2) for e in job.events(r)), job.explain()


def test_ranks_disagree(tmp_path: Path) -> None:
    """Rank 1 calls with another count, then dtype, then op: every rank raises RankMismatchError
    at once, naming the field, outputs untouched; the communicator then still works.
    Protection: the agreement check (without it the ranks run different rings: a timeout or,
    for the dtype, silently wrong data)."""
    job = run_scenario(tmp_path, "mismatch", victim=1)
    for r in range(3):
        for label in ("count", "dtype", "op"):
            facts = job.event(r, label)
            assert facts["outcome"] == "error" and facts["error"] == "RankMismatchError", facts
            assert f"{label} (this rank" in facts["message"], facts["message"]
            assert facts["elapsed"] < T, facts
            assert facts["input_intact"]
            if r != 1:  # the victim's output has another size or dtype: still all poison
                untouched(facts)
            else:
                assert facts["output"]["correct"] == 0 and facts["output"]["other"] == 0, facts
        correct(job, r, "after")
        closed_at_once(job, r)
    assert job.returncode == 0, job.explain()


@pytest.mark.parametrize("check", [True, False], ids=["check", "no-check"])
def test_rank_skips_a_call(tmp_path: Path, check: bool) -> None:
    """Rank 1 skips call 2. With the check on, ranks 0 and 2 time out in the agreement check,
    naming rank 1, outputs untouched; with it off, they time out in the ring, rank 2 naming rank 1
    as the peer it waited for. Either way rank 1's close then raises PeerFailedError at once.
    Protection: the bounded agreement check (check on), the ring's bounded waits (check off)."""
    job = run_scenario(tmp_path, "skip", victim=1, check=check)
    for r in (0, 2):
        if check:
            facts = timed_out(job, r, "fault", "in the agreement check of call 2", "(rank 1 is at call 1)")
            untouched(facts)
        else:
            facts = timed_out(job, r, "fault", "in the ring algorithm, step ", "transfer seq ",
                              ", waiting for rank ")
            assert facts["algorithm"] == "ring" and facts["seq"] >= 1, facts
            if r == 2 and facts["error"] == "MpiringTimeoutError":  # (not stopped by rank 0's mark)
                assert facts["peer"] == 1 and "waiting for rank 1 to fill slot" in facts["message"], facts
        closed_at_once(job, r)
    closed_at_once(job, 1, "PeerFailedError")  # naming whichever of ranks 0 and 2 had abandoned by then
    assert "abandoned it after an error or a timeout of their own" in job.records[1]["close"]["outcome"]
    assert job.returncode == 0, job.explain()


def test_rank_killed_mid_pipeline(tmp_path: Path) -> None:
    """Rank 1 dies at its 10th send of call 2 (scripts/fault.py, ``kill``), with mpiexec told not
    to kill the others (``-disable-auto-cleanup``): ranks 0 and 2 raise MpiringTimeoutError from
    the ring within the timeout, rank 2 naming rank 1, and never report success. (The survivors
    then end without MPI_Finalize, which would wait for the dead rank.) Protection: the ring's
    bounded waits (signals.Waiter). Deterministic (issue 25, item 3): the victim exits rather
    than die of a signal, which hydra answered by SIGKILLing every rank whenever it reaped the
    victim first, and no survivor touches MPI again before every survivor recorded."""
    job = run_scenario(tmp_path, "kill", victim=1, auto_cleanup=False)
    assert [e["call"] for e in job.events(1)] == ["warm-up"], job.explain()
    for r in (0, 2):
        correct(job, r, "warm-up")
        facts = timed_out(job, r, "fault", "in the ring algorithm, step ")
        if r == 2:
            assert facts["peer"] == 1, facts
        assert facts["output"]["correct"] < COUNT, facts  # some elements still poison or partial
    assert job.returncode != 0


def test_rank_killed_under_default_mpiexec(tmp_path: Path) -> None:
    """The same death under a default ``mpiexec``: MPICH kills every rank at once when one dies
    (here: exits without MPI_Finalize), long before mpiring's timeout (60 s here), and no rank
    reports the call as done. Covers the README's account of MPICH's behaviour, not a
    protection of mpiring. The bound is the whole job's wall time, start-up included (about
    3 s idle, up to 6 s on a loaded 2-core machine), so it sits far below the timeout: a
    survivor left to time out would take 60 s."""
    job = run_scenario(tmp_path, "kill", victim=1, timeout=60.0, limit=90.0)
    assert job.returncode != 0 and job.elapsed < 30.0, job.explain()
    assert not any(e["call"] == "fault" for r in (0, 2) for e in job.events(r)), job.explain()


def test_rank_stopped_past_the_timeout(tmp_path: Path) -> None:
    """Rank 1 SIGSTOPs itself at its 10th send of call 2 and is resumed 2.5 s later: ranks 0 and 2
    raise within the timeout; rank 1, once resumed, raises too (PeerFailedError: their marks);
    nothing writes a survivor's
    output after its call raised; the job then ends normally.
    Protection: the ring's bounded waits, and the close that abandons a failed communicator
    instead of waiting for its peers."""
    resume = T + 1.5
    job = run_scenario(tmp_path, "stop", victim=1, env={"MPIRING_FAULT_RESUME": str(resume)})
    for r in (0, 2):
        facts = timed_out(job, r, "fault", "in the ring algorithm, step ")
        assert job.records[r]["output_after_victim_resumed"] == facts["output"], job.explain()
        closed_at_once(job, r)
    facts = job.event(1, "fault")
    # once resumed it sees its peers' failure marks (or times out itself): either way it raises
    assert facts["error"] in ("MpiringTimeoutError", "PeerFailedError") and facts["elapsed"] >= resume, facts
    closed_at_once(job, 1)
    assert job.returncode == 0, job.explain()


@pytest.mark.parametrize("safe", [True, False], ids=["protected", "control-without-waits"])
def test_straggler(tmp_path: Path, safe: bool) -> None:
    """30 calls of random sizes, dtypes, ops and placements while a random rank sleeps at random
    steps: every result is exact on every rank. Protection: the pipeline's sequence-numbered
    slot waits; the control run turns them off and must see wrong data, which shows this test
    can fail."""
    env = {} if safe else {"MPIRING_FAULT_UNSAFE": "1"}
    job = run_scenario(tmp_path, "straggler", victim=0, env=env)
    calls = [e for r in range(3) for e in job.events(r) if e["call"].startswith("straggler")]
    assert len(calls) == 3 * 30, job.explain()
    wrong = [e for e in calls if e["outcome"] != "ok" or e["output"]["other"] or e["output"]["untouched"]]
    if safe:
        assert not wrong, wrong[:3]
        assert job.returncode == 0, job.explain()
    else:
        assert wrong, "without the waits the stragglers should have corrupted some result"


def test_rank_never_joins_setup(tmp_path: Path) -> None:
    """Rank 2 never creates the communicator: ranks 0 and 1 raise MpiringTimeoutError from set-up
    within the timeout, saying 2 of 3 ranks joined and naming rank 2. Protection: the bounded
    join rendezvous before any blocking collective of set-up (MPI_Comm_dup would wait for ever).
    The rank whose timeout expires first ends set-up for both (mpiring.node.rendezvous), so the other
    may raise a little before its own timeout would have."""
    job = run_scenario(tmp_path, "setup", victim=2)
    waited = []
    for r in (0, 1):
        facts = job.event(r, "set-up")
        assert facts["error"] == "MpiringTimeoutError", facts
        assert (facts["peer"], facts["step"]) == (2, "join"), facts
        assert facts["elapsed"] < T + SLACK, facts
        waited.append(facts["elapsed"])
        assert (f"rank {r} timed out after 1 s in Communicator set-up, waiting for the other ranks to join: "
                "2 of 3 ranks joined (missing: rank 2)") in facts["message"], facts["message"]
    assert max(waited) >= T, f"no rank waited the whole timeout: {waited}"
    assert job.returncode == 0, job.explain()


# -- issue 17: a rank that fails mid-call stops its peers at once ------------------------------

QUICK = 2.0  # seconds a peer may take to raise after a rank failed, with a 60 s timeout


@pytest.mark.parametrize("scenario, error, fragment", [
    ("fold-raise", "RuntimeError", "injected fold failure on rank 1"),
    ("sigint", "KeyboardInterrupt", "KeyboardInterrupt"),
])
def test_a_rank_failing_mid_call_stops_its_peers_at_once(tmp_path: Path, scenario: str, error: str,
                                                         fragment: str) -> None:
    """Rank 1 fails inside the ring (a fold raises; Ctrl-C): it marks the communicator failed with
    its error before re-raising, and ranks 0 and 2, whose waits poll the marks, raise
    PeerFailedError naming rank 1 and its error within QUICK seconds, not after the 60 s timeout
    (before issue 17 they waited for the whole timeout)."""
    job = run_scenario(tmp_path, scenario, victim=1, timeout=60.0, limit=45.0, auto_cleanup=False)
    victim = job.event(1, "fault")
    assert victim["outcome"] == "error" and victim["error"] == error, job.explain()
    for r in (0, 2):
        facts = job.event(r, "fault")
        assert facts["outcome"] == "error" and facts["error"] == "PeerFailedError", job.explain()
        assert "rank 1 failed with" in facts["message"] and fragment in facts["message"], facts
        assert facts["elapsed"] < QUICK, f"rank {r} raised after {facts['elapsed']:.2f} s"
        assert facts["input_intact"], facts
        assert facts["output"]["correct"] < COUNT, facts  # never a success


def test_the_callers_seterr_does_not_reach_the_folds(tmp_path: Path) -> None:
    """Rank 1 runs under np.seterr(all="raise") and the float16 sum overflows: folds run under
    their own errstate, so every rank gets inf (IEEE), none raises FloatingPointError (before:
    rank 1 raised and its peers waited for the timeout)."""
    job = run_scenario(tmp_path, "seterr", victim=1, timeout=60.0, limit=45.0, auto_cleanup=False)
    for r in range(3):
        facts = job.event(r, "fault")
        assert facts["outcome"] == "ok" and facts["all_inf"], job.explain()


def test_the_timeout_bounds_the_time_without_progress(tmp_path: Path) -> None:
    """Rank 1 enters call 2 0.9 timeouts late (the agreement check waits for it), then stalls
    in the ring at its 10th send: ranks 0 and 2 raise MpiringTimeoutError (or PeerFailedError
    relaying it) about one timeout after the stall began, about 1.9 timeouts into the call: a
    wait restarts its clock whenever its peer moves (issue 25; from issue 17 to then, the
    timeout bounded the whole call, so they raised at 1.0, while rank 1 was merely late)."""
    timeout = 2.0
    job = run_scenario(tmp_path, "late", victim=1, timeout=timeout, limit=40.0, auto_cleanup=False)
    errors = []
    for r in (0, 2):  # one times out; the other may stop earlier, on its failure mark
        facts = job.event(r, "fault")
        errors.append(facts["error"])
        assert facts["outcome"] == "error", job.explain()
        elapsed = facts["elapsed"]
        assert 1.8 * timeout <= elapsed < 1.9 * timeout + SLACK, f"rank {r}: {elapsed:.2f} s"
    assert "MpiringTimeoutError" in errors and set(errors) <= {"MpiringTimeoutError", "PeerFailedError"}
