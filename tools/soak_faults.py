"""``python -m tools.soak_faults``: the fault tests, many times in a row, beside other MPI jobs.

The fault tests (``tests/faults``) start their own ``mpiexec`` jobs and bound how long a rank
may take to see a peer's failure. Those bounds must hold on a loaded 2-core CI machine, not
only on an idle one. This runs ``python -m pytest tests/faults`` ``--runs`` times in a row
(default 20) while ``--load`` other MPI jobs (default 2) run beside it the whole time, each a
loop of ``mpiexec -n 2 python -m pytest --with-mpi`` over MPI tests that keep their ranks busy
(MPICH's ranks poll: each load job takes a core while it runs). It stops at the first failed
run, prints that run's output, and exits 1; else it prints one line per run and exits 0.

    python -m tools.soak_faults [--runs 20] [--load 2] [--log FILE]    # from the repository root
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD_TESTS = ("tests/mpi/test_mpi_stress.py", "tests/mpi/test_mpi_allreduce.py", "tests/mpi/test_mpi_hier.py")


def mpiexec() -> str:
    """The mpiexec beside this Python (the MPI mpi4py was built for), else PATH's."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit("no mpiexec beside this Python nor on PATH")
    return found


def start_load(index: int, log: Path) -> subprocess.Popen:
    """A shell loop running the load tests under ``mpiexec -n 2`` until killed, in its own session."""
    run = (f"{mpiexec()} -n 2 {sys.executable} -m pytest -q -p no:cacheprovider --with-mpi "
           + " ".join(LOAD_TESTS))
    loop = (f"i=0; while true; do i=$((i+1)); timeout -k 5 600 {run} > /dev/null 2>&1; "
            f"echo \"load {index} job $i rc $?\"; done")
    return subprocess.Popen(["bash", "-c", loop], cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop_load(jobs: list[subprocess.Popen]) -> None:
    for job in jobs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.soak_faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of tests/faults in a row (default 20)")
    parser.add_argument("--load", type=int, default=2, help="MPI jobs running beside them (default 2)")
    parser.add_argument("--log", type=Path, help="also write the summary here")
    args = parser.parse_args(argv)
    lines = [f"# python -m tools.soak_faults --runs {args.runs} --load {args.load}: {os.cpu_count()} CPUs, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    print(lines[0], flush=True)
    load_logs = [Path(f"/tmp/mpiring-soak-load-{os.getpid()}-{i}.log") for i in range(args.load)]
    jobs = [start_load(i, log) for i, log in enumerate(load_logs)]
    failed = 0
    try:
        time.sleep(5)  # the load is running before the first run starts
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf",
                                   "tests/faults"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
            summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "(no output)"
            lines.append(f"run {run:2d}: rc {done.returncode}, {time.monotonic() - start:5.1f} s: {summary}")
            print(lines[-1], flush=True)
            if done.returncode != 0:
                failed = run
                print(done.stdout[-6000:], done.stderr[-2000:], sep="\n", flush=True)
                break
    finally:
        stop_load(jobs)
    ended = [line for log in load_logs if log.exists() for line in log.read_text().splitlines()]
    passed = sum(line.endswith(" rc 0") for line in ended)
    verdict = f"failed at run {failed}" if failed else f"{args.runs} runs in a row passed"
    lines.append(f"# {verdict}; {len(ended)} load jobs ended beside them ({passed} passed, "
                 f"{len(ended) - passed} failed or were stopped)")
    print(lines[-1], flush=True)
    for log in load_logs:
        with contextlib.suppress(OSError):
            log.unlink()
    if args.log:
        args.log.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
