"""mpiring.bench.cli: options, defaults, validation, nccl-tests' letters, --help (short: the
flags) and the manual it points to (docs/bench.md: every flag, the method)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpiring.bench.cli import MANUAL, build_parser, parse_args

ROOT = Path(__file__).resolve().parents[1]


def help_text(columns: int = 80, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    """--help as a terminal of ``columns`` columns shows it."""
    assert monkeypatch is not None
    monkeypatch.setenv("COLUMNS", str(columns))
    return build_parser().format_help()


def flags(text: str) -> set[str]:
    """The option strings --help lists (each entry's lines start with two spaces and a dash)."""
    found = set()
    for line in text.splitlines():
        m = re.match(r"^  (-[^ ].*?)(?:  |$)", line)
        if m:
            found.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", m.group(1)))
    return found


def manual() -> str:
    return " ".join((ROOT / MANUAL).read_text().split())


def test_defaults():
    o = parse_args([])
    assert (o.minbytes, o.maxbytes, o.stepfactor, o.stepbytes) == (None, None, None, None)
    assert o.size_range(gpu=True) == (1024, 8 << 30)
    assert o.size_range(gpu=False) == (1024, 64 << 20)
    assert o.algos is None and o.batches == ("auto",) and o.placements == ("out",)
    assert (o.dtype, o.op, o.check, o.host, o.gpu, o.plot) == ("float32", "sum", 1, False, False,
                                                               True)
    assert o.memory == "auto" and o.average == 3 and o.output_format == "table"
    assert o.time_budget == 0.15 and o.reps == 5 and o.iters is None and o.warmup is None
    assert (o.timing, o.graph_launches) == ("eager", 1)
    assert o.output_dir == "mpiring-results" and o.name == "allreduce"


def test_everything_given():
    o = parse_args(["-b", "1M", "-e", "1G", "-f", "4", "--algo", "ring,nccl", "--batches",
                    "1,2,auto,4,2", "-d", "bfloat16", "-o", "max", "--placement", "in,out",
                    "-n", "20", "-w", "3", "--reps", "7", "--time-budget", "0.5", "--no-check",
                    "--host", "--output-dir", "/tmp/x", "--name", "h200", "--no-plot",
                    "--seed", "9", "--timeout", "30", "--time-agreement", "--progress", "off"])
    assert o.size_range(gpu=True) == (1 << 20, 1 << 30) and o.stepfactor == 4
    assert o.algos == ("ring", "nccl") and o.batches == (1, 2, "auto", 4)
    assert o.placements == ("in", "out") and (o.dtype, o.op) == ("bfloat16", "max")
    assert (o.iters, o.warmup, o.reps, o.time_budget) == (20, 3, 7, 0.5)
    assert o.check == 0 and o.host and o.memory == "host" and not o.plot and o.time_agreement
    assert (o.output_dir, o.name, o.seed, o.timeout, o.progress) == ("/tmp/x", "h200", 9, 30.0,
                                                                    "off")


@pytest.mark.parametrize(("text", "numpy_name"), [
    ("half", "float16"), ("float", "float32"), ("double", "float64"), ("bfloat16", "bfloat16"),
    ("int32", "int32"), ("int64", "int64"), ("int", "int32"), ("float16", "float16"),
    ("FLOAT", "float32"), ("float64", "float64"),
])
def test_types_by_nccl_tests_or_numpy_name(text, numpy_name):
    assert parse_args(["-d", text]).dtype == numpy_name
    assert parse_args(["--datatype", text]).dtype == numpy_name


@pytest.mark.parametrize(("argv", "message"), [
    (["-d", "uint8"], "nccl-tests type that mpiring does not reduce"),
    (["-d", "f8e4m3"], "nccl-tests type that mpiring does not reduce"),
    (["-d", "all"], "one type per run"),
    (["-d", "complex64"], "unknown type"),
    (["-o", "avg"], "the bench does not time avg"),
    (["-o", "mulsum"], "not an mpiring op"),
    (["-o", "all"], "one op per run"),
    (["-a", "ring,nccl"], "the algorithms are --algo"),
    (["-a", "4"], "must be one of 0 rank 0, 1 average, 2 minimum, 3 maximum"),
    (["-G", "-1"], "at least 0"),
    (["-c", "-1"], "at least 0"),
])
def test_nccl_tests_values_mpiring_cannot_take_are_explained(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_nccl_tests_letters():
    o = parse_args(["-b", "8", "-e", "128M", "-f", "2", "-n", "50", "-w", "5", "-c", "3", "-G",
                    "4", "-a", "1", "-d", "half", "-o", "prod"])
    assert (o.minbytes, o.maxbytes, o.stepfactor, o.iters, o.warmup) == (8, 128 << 20, 2, 50, 5)
    assert (o.check, o.timing, o.graph_launches, o.average) == (3, "graph", 4, 1)
    assert (o.dtype, o.op) == ("float16", "prod")
    assert parse_args(["-c", "0"]).check == 0
    assert parse_args(["--check"]).check == 1 and parse_args(["--check", "5"]).check == 5
    assert parse_args(["-G", "0"]).timing == "eager"
    assert (parse_args(["--graph"]).timing, parse_args(["--graph"]).graph_launches) == ("graph", 1)
    assert parse_args(["--cudagraph", "2"]).graph_launches == 2
    assert [parse_args(["-a", str(a)]).average for a in range(4)] == [0, 1, 2, 3]
    assert parse_args(["--average", "2"]).average == 2


def test_nccl_tests_output_measures_both_placements_unless_told():
    o = parse_args(["--nccl-tests"])
    assert o.output_format == "nccl-tests" and o.placements == ("out", "in")
    assert parse_args(["--nccl-tests", "--placement", "in"]).placements == ("in",)


def test_gpu_and_host_exclude_each_other(capsys):
    assert parse_args(["--gpu"]).memory == "gpu"
    with pytest.raises(SystemExit) as exc:
        parse_args(["--gpu", "--host"])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["-b", "1Q"], ["-e", "0"], ["-b", "2M", "-e", "1M"], ["-f", "1"], ["-f", "2", "-i", "1M"],
    ["--algo", "gloo"], ["--batches", "0"], ["--batches", "two"], ["-d", "complex64"],
    ["-o", "avg"], ["--placement", "both"], ["-n", "0"], ["-w", "-1"], ["--time-budget", "0"],
    ["--name", "a/b"], ["--progress", "maybe"], ["-a", "ring"],
])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_help_lists_every_option_in_under_100_lines(monkeypatch):
    text = help_text(80, monkeypatch)
    listed = flags(text)
    for flag in ["-b", "--minbytes", "-e", "--maxbytes", "-f", "--stepfactor", "-i", "--stepbytes",
                 "--algo", "--batches", "-d", "--dtype", "-o", "--op", "--placement", "--iters",
                 "--warmup", "--reps", "--time-budget", "--max-iters", "--output-dir", "--name",
                 "--no-plot", "--host", "--gpu", "--check", "--no-check", "--seed", "--timeout",
                 "--time-agreement", "--progress", "--overlap", "--gemm-size", "--train-gemm-size",
                 "-a", "--average", "-G", "--cudagraph", "--graph", "-c", "--nccl-tests", "-g",
                 "--ngpus", "-t", "--nthreads", "-z", "--blocking", "--baseline", "--collective",
                 "--gemm-sms", "--sm-budget", "--reproducible"]:
        assert flag in listed, flag
    assert len(text.splitlines()) < 100, len(text.splitlines())  # it was 225 lines
    assert len(help_text(200, monkeypatch).splitlines()) < 100
    assert MANUAL in text and "exit status" in text and "interrupted" in text


def test_the_manual_documents_every_flag_of_help(monkeypatch):
    text = manual()
    for flag in sorted(flags(help_text(80, monkeypatch)) - {"-h", "--help"}):
        assert re.search(rf"`[^`]*(?<![\w-]){re.escape(flag)}(?![\w-])[^`]*`", text), flag
    assert "busbw" in text and "Exit status" in text
    assert "In earlier mpiring releases `-a` was the algorithm list" in text  # -a's new meaning
    assert "mpiring-results" in text and '"interrupted": "SIGINT"' in text


def test_overlap_options():
    o = parse_args([])
    assert o.overlap is None and o.gemm_size == 8192 and o.train_gemm_size == 4096
    assert o.overlap_shapes == ()
    o = parse_args(["--overlap", "gemm", "--gemm-size", "4096"])
    assert (o.overlap, o.gemm_size, o.overlap_shapes) == ("gemm", 4096, ("gemm",))
    o = parse_args(["--overlap", "train,gemm,train", "--train-gemm-size", "2048"])
    assert (o.overlap, o.overlap_shapes, o.train_gemm_size) == ("gemm,train", ("gemm", "train"), 2048)
    assert parse_args(["--overlap", "train"]).overlap_shapes == ("train",)


@pytest.mark.parametrize("argv", [["--overlap", "fft"], ["--gemm-size", "512"],
                                  ["--gemm-size", "big"], ["--overlap", ""],
                                  ["--overlap", "gemm,fft"], ["--train-gemm-size", "100"]])
def test_bad_overlap_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_the_manual_names_the_gpu_algorithms_and_overlap():
    text = manual()
    for word in ("--overlap", "--gemm-size", "--train-gemm-size", "oneshot", "twoshot", "auto",
                 "n/a", "_overlap.png", "_makespan.png", "T_both", "min(T_gemm, T_ar)"):
        assert word in text, word


def test_collectives_are_a_comma_list_or_all():
    assert parse_args([]).collectives == ("allreduce",)
    assert parse_args(["--collective", "reduce_scatter"]).collectives == ("reduce_scatter",)
    o = parse_args(["--collective", "allgather,reduce_scatter,allgather"])
    assert o.collectives == ("allgather", "reduce_scatter")  # in order, once each
    assert parse_args(["--collective", "all"]).collectives == ("allreduce", "reduce_scatter",
                                                               "allgather")


def test_the_default_file_name_is_the_collective():
    assert parse_args([]).name == "allreduce"
    assert parse_args(["--collective", "allgather"]).name == "allgather"
    assert parse_args(["--collective", "all"]).name == "collectives"
    assert parse_args(["--collective", "allgather", "--name", "h200"]).name == "h200"


@pytest.mark.parametrize(("argv", "message"), [
    (["--collective", "alltoall"], "unknown collective 'alltoall'"),
    (["--collective", "allgather", "--overlap", "gemm"], "--overlap gemm measures the allreduce only"),
    (["--collective", "all", "--overlap", "gemm"], "drop --collective"),
    (["--collective", "allgather", "--overlap", "train,gemm"], "--overlap gemm,train measures"),
])
def test_bad_collectives_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_manual_explains_the_collectives():
    text = manual()
    assert "--collective" in text and "reduce_scatter" in text and "allgather" in text
    assert "the size is the whole buffer" in text and "busbw = algbw · (n−1)/n" in text
    assert "rounded down to whole blocks" in text and "left out of the default sweep" in text


def test_the_manual_says_what_no_average_op_means():
    """nccl-tests' avg is refused by the bench, but the API has op='avg': say so, not that
    mpiring has no average op."""
    text = manual()
    assert "no average op" not in text and 'the API has `op="avg"`' in text
    with pytest.raises(SystemExit):
        parse_args(["-o", "avg"])


def test_time_agreement_is_described_as_the_code_does_it(monkeypatch):
    """On one node the agreement check is a post in shared memory, not an MPI_Allreduce."""
    text = " ".join(help_text(80, monkeypatch).split())
    assert "MPI_Allreduce" not in text
    assert "on one node a descriptor posted in shared memory" in manual()


@pytest.mark.parametrize("argv", [["-g", "1"], ["--ngpus", "1"], ["-t", "1"], ["--nthreads", "1"],
                                  ["-z", "0"], ["--blocking", "0"], ["-z", "1"],
                                  ["-b", "8", "-e", "128M", "-f", "2", "-g", "1"]])
def test_nccl_tests_gpu_thread_and_blocking_flags_carry_over(argv):
    parse_args(argv)  # nccl-tests' quick examples, with the values that fit one rank per GPU


@pytest.mark.parametrize(("argv", "message"), [
    (["-g", "8"], "-g/--ngpus 8: only 1 here: mpiring runs one process per GPU, so launch as "
                  "many ranks as GPUs"),
    (["--ngpus", "two"], "only 1 here"),
    (["-t", "2"], "-t/--nthreads 2: only 1 here: each rank is one thread"),
    (["-z", "2"], "-z/--blocking 2: 0 (calls issued back to back) or 1"),
    (["-z", "1", "--graph"], "-z/--blocking 1 waits for each call, but -G/--graph replays"),
])
def test_nccl_tests_gpu_thread_and_blocking_values_that_cannot_work_are_explained(argv, message,
                                                                                 capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_the_readme_runs_each_console_script_as_pyproject_does():
    """README's "Commands" line names the module each console script of pyproject.toml runs."""
    scripts = dict(re.findall(r'^(mpiring-[\w-]+) = "([\w.]+):\w+"$',
                              (ROOT / "pyproject.toml").read_text(), re.MULTILINE))
    assert set(scripts) == {"mpiring-bench", "mpiring-tune"}
    line = " ".join(re.search(r"\*\*Commands:\*\*(.*?)\.\n", (ROOT / "README.md").read_text(),
                              re.DOTALL).group(1).split())
    names = re.findall(r"`(mpiring-[\w-]+)`", line)
    modules = re.findall(r"`python -m ([\w.]+)`", line)
    assert len(names) == len(modules) == len(scripts), line
    for name, module in zip(names, modules, strict=True):
        assert scripts[name].removesuffix(".__main__") == module, (name, module, scripts[name])
