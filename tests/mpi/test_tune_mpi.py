"""python -m mpiring.bench.tune on real ranks (host transport): the table file is written once, by
rank 0, parses with mpiring.auto.table.load, and --merge keeps other rank counts' tables;
mpiring-tune writes the user's table for this machine, which auto then uses.

Run:  mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_tune_mpi.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mpi4py import MPI
from mpi_support import HostTimeline

import mpiring
from mpiring.auto import machine
from mpiring.auto import table as tuning
from mpiring.auto import tuning as tuning_lookup
from mpiring.auto.machine import MachineKey
from mpiring.bench import tune
from mpiring.bench import tune as entry

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
    if "sm_budget" not in run or run["sm_budget"] is not None:
        problems.append(f"no budget given, the run says {run.get('sm_budget', 'nothing')}")
    if table.choose(world.size, 12345) != "ring":
        problems.append("auto would not pick ring")
    verdict(problems)


def test_the_table_records_the_sm_budget_it_was_measured_with(shared):
    """A table measured with ``--sm-budget`` (every sweep's communicator held to it) says so."""
    path = shared / "budget.json"
    status = tune.main([*TINY, "--sm-budget", "12", "--output", str(path)])
    world.Barrier()
    run = tuning.load(path).meta.get("runs", {}).get(str(world.size), {})
    verdict([] if status == 0 and run.get("sm_budget") == 12 else
            [f"exit status {status}, the run says sm_budget {run.get('sm_budget')}"])


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


# -- mpiring-tune: the user's table, which auto then uses by itself ---------------------


def user_dir(shared: Path, monkeypatch) -> Path:
    folder = shared / "tuning"
    monkeypatch.setenv(tuning_lookup.TUNING_DIR, str(folder))
    return folder


def test_mpiring_tune_writes_the_users_table_and_auto_then_uses_it(shared, monkeypatch, capsys):
    """End to end without fakes: on the host transport the machine key is (none, ranks, none);
    the table goes to MPIRING_TUNING_DIR under that key's name, and a new communicator finds it
    there (one rank: the dispatcher's own rule, no table)."""
    folder = user_dir(shared, monkeypatch)
    status = entry.main(TINY)
    world.Barrier()
    key = MachineKey("none", world.size, "none")
    path = folder / key.file_name()
    problems = [] if status == 0 else [f"exit status {status}"]
    if not path.is_file():
        problems.append(f"no {path}: {sorted(p.name for p in folder.iterdir())}")
        verdict(problems)
    table = tuning.load(path)
    if (table.gpu, table.link, table.tables) != ("none", "none", {world.size: ((None, "ring"),)}):
        problems.append(f"table {table}")
    said = " ".join(capsys.readouterr().out.split())
    uses = f"auto uses it on this machine ({key.describe()}) from now on"
    unused = "auto will not use it: a communicator of one rank reads no tuning table"
    if world.rank == 0 and (uses if world.size > 1 else unused) not in said:
        problems.append(f"the path and its use were not printed: {said[-400:]}")
    # What the tuner said is what --show then shows (on one rank: no table).
    status = entry.main(["--show", "--progress", "off"])
    shown = " ".join(capsys.readouterr().out.split())
    if world.rank == 0 and status == 0:
        if (uses in said) != (f"user table {path}" in shown) or \
                (unused in said) != ("(no tuning table)" in shown):
            problems.append(f"the tuner said {said[-300:]!r}, --show says {shown!r}")
    elif status != 0:
        problems.append(f"--show: exit status {status}")
    with mpiring.Communicator(world, gpu=False, timeout=60) as comm:
        choice = comm.tuning
        want = tuning_lookup.ONE_RANK if world.size == 1 else tuning_lookup.USER
        if choice.origin != want or (world.size > 1 and choice.path != str(path)):
            problems.append(f"comm.tuning: {choice}")
        if comm.tuning_table is not choice.table:  # the table the call path holds
            problems.append("the dispatcher reads another table than comm.tuning")
    verdict(problems)


def test_mpiring_tune_on_a_faked_gpu_machine(shared, monkeypatch, capsys):
    """The machine detection seam faked to a GPU node: the file is named and labelled for it,
    and a later communicator on that 'machine' uses it; --show says so."""
    folder = user_dir(shared, monkeypatch)
    key = MachineKey("Fake GPU", world.size, "nvlink")
    monkeypatch.setattr(machine, "detect", lambda ranks, buses: key._replace(ranks=ranks))
    status = entry.main(TINY)
    world.Barrier()
    path = folder / f"fake-gpu-{world.size}x-nvlink.json"
    problems = [] if status == 0 else [f"exit status {status}"]
    table = tuning.load(path)
    if (table.gpu, table.link) != ("Fake GPU", "nvlink") or not table.covers(key):
        problems.append(f"labels {table.gpu!r} {table.link!r}")
    capsys.readouterr()
    status = entry.main(["--show", "--host", "--progress", "off"])
    out = " ".join(capsys.readouterr().out.split())
    if status != 0:
        problems.append(f"--show: exit status {status}")
    if world.size > 1 and world.rank == 0 and f"user table {path}" not in out:
        problems.append(f"--show said: {out}")
    verdict(problems)


@pytest.mark.mpi(min_size=2)
def test_the_bench_banner_names_autos_table(shared, capsys):
    from mpiring.bench.__main__ import main as bench

    status = bench(["-b", "1K", "-e", "1K", "--algo", "auto", "--time-budget", "0.003", "--reps",
                    "2", "--progress", "off", "--output-dir", str(shared), "--name", "b", "--no-plot"])
    problems = [] if status == 0 else [f"exit status {status}"]
    out = " ".join(capsys.readouterr().out.split())
    if world.rank == 0 and f"tuning {world.size} x none, none: no GPU" not in out:
        problems.append(f"banner: {out[600:1400]}")
    verdict(problems)


# -- --overlap: refused on the host; the sweep itself over a simulated GPU timeline ---------------


def test_overlap_is_refused_on_the_host_before_measuring(shared, capsys):
    path = shared / "overlap.json"
    status = tune.main([*TINY, "--overlap", "--output", str(path)])
    world.Barrier()
    captured = capsys.readouterr()
    problems = [] if status == 3 else [f"exit status {status}"]
    if path.exists():
        problems.append("a table was written")
    if world.rank == 0:
        if "--overlap needs GPUs" not in captured.err:
            problems.append(f"stderr: {captured.err}")
        if "mpiring tuning" in captured.out:
            problems.append("a sweep started before the refusal")
    verdict(problems)


def test_overlap_sweep_writes_the_overlap_entries(shared, monkeypatch, capsys):
    """The whole --overlap path on host arrays (the tuner's three sweeps but graph, the bench's
    runner, measurer and rows, the table, its file and summary), with the GEMM side simulated
    where the bench would set up CuPy's: the ring, auto's only host candidate, is the overlap
    ladder's, and the file says how it was measured."""
    from dataclasses import replace

    from mpiring.bench import runner, tune_overlap
    from mpiring.bench.overlap import GEMM, Shape
    from mpiring.bench.overlap_run import OverlapMeasurer

    real_setup = runner.setup
    seen = []

    def setup(opts, world_, reporter, algos_for=None):
        seen.append(opts.overlap)
        if not opts.overlap:
            return real_setup(opts, world_, reporter, algos_for)
        sw = real_setup(replace(opts, overlap=None), world_, reporter, algos_for)
        sw.opts = opts
        sw.overlap = OverlapMeasurer(world_, HostTimeline(), [
            Shape(GEMM, "sim", 1e-3, slowdowns=True, label="simulated 1 ms GEMMs")], reps=2)
        sw.overlap_line = sw.overlap.describe()
        reporter.set_baseline(sw.baseline, overlap=opts.overlap_shapes)
        return sw

    monkeypatch.setattr(tune_overlap, "require_gpus", lambda bench, world_: None)
    monkeypatch.setattr(runner, "setup", setup)
    path = shared / "overlap.json"
    status = tune.main([*TINY, "--overlap", "--output", str(path)])
    world.Barrier()
    out = " ".join(capsys.readouterr().out.split())
    problems = [] if status == 0 else [f"exit status {status}"]
    if seen != [None, "gemm"]:
        problems.append(f"sweeps with --overlap {seen} (want the eager one, then gemm)")
    table = tuning.load(path)
    if table.overlap != {world.size: ((None, "ring"),)} or table.graph:
        problems.append(f"overlap {table.overlap}, graph {table.graph}")
    if table.tables != {world.size: ((None, "ring"),)}:
        problems.append(f"tables {table.tables}")
    run = table.meta.get("runs", {}).get(str(world.size), {})
    if run.get("overlap sizes") != "1 KiB .. 4 KiB (2 sizes)" or run.get("overlap candidates") \
            != ["ring"] or "simulated 1 ms GEMMs" not in run.get("overlap workload", ""):
        problems.append(f"run {run}")
    if not table.has_overlap(world.size) or table.choose(world.size, 4096, overlap=True) != "ring":
        problems.append("auto would not read the overlap entries")
    if world.rank == 0:
        for text in ("eager calls beside a GEMM (makespan)", "smallest makespan, gemm at 1 KiB",
                     "beside a GEMM (overlap=True, smallest makespan): # every size ring"):
            if text not in out:
                problems.append(f"no {text!r} in the output")
    verdict(problems)
