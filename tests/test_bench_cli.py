"""mpiring.bench.cli: options, defaults, validation, --help."""

from __future__ import annotations

import pytest

from mpiring.bench.cli import build_parser, parse_args


def test_defaults():
    o = parse_args([])
    assert (o.minbytes, o.maxbytes, o.stepfactor, o.stepbytes) == (None, None, None, None)
    assert o.size_range(gpu=True) == (1024, 8 << 30)
    assert o.size_range(gpu=False) == (1024, 64 << 20)
    assert o.algos is None and o.batches == ("auto",) and o.placements == ("out",)
    assert (o.dtype, o.op, o.check, o.host, o.plot) == ("float32", "sum", True, False, True)
    assert o.time_budget == 0.15 and o.reps == 5 and o.iters is None and o.warmup is None
    assert o.output_dir == "results" and o.name == "allreduce"


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
    assert not o.check and o.host and not o.plot and o.time_agreement
    assert (o.output_dir, o.name, o.seed, o.timeout, o.progress) == ("/tmp/x", "h200", 9, 30.0,
                                                                    "off")


@pytest.mark.parametrize("argv", [
    ["-b", "1Q"], ["-e", "0"], ["-b", "2M", "-e", "1M"], ["-f", "1"], ["-f", "2", "-i", "1M"],
    ["--algo", "gloo"], ["--batches", "0"], ["--batches", "two"], ["-d", "complex64"],
    ["-o", "avg"], ["--placement", "both"], ["-n", "0"], ["-w", "-1"], ["--time-budget", "0"],
    ["--name", "a/b"], ["--progress", "maybe"],
])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_help_documents_every_option():
    text = build_parser().format_help()
    for flag in ["-b", "--minbytes", "-e", "--maxbytes", "-f", "--stepfactor", "-i", "--stepbytes",
                 "--algo", "--batches", "-d", "--dtype", "-o", "--op", "--placement", "--iters",
                 "--warmup", "--reps", "--time-budget", "--max-iters", "--output-dir", "--name",
                 "--no-plot", "--host", "--check", "--no-check", "--seed", "--timeout",
                 "--time-agreement", "--progress", "--overlap", "--gemm-size"]:
        assert flag in text, flag
    for action in build_parser()._actions:
        assert action.help, action.option_strings
    assert "busbw" in text and "exit status" in text


def test_overlap_options():
    o = parse_args([])
    assert o.overlap is None and o.gemm_size == 8192
    o = parse_args(["--overlap", "gemm", "--gemm-size", "4096"])
    assert (o.overlap, o.gemm_size) == ("gemm", 4096)


@pytest.mark.parametrize("argv", [["--overlap", "fft"], ["--gemm-size", "512"],
                                  ["--gemm-size", "big"]])
def test_bad_overlap_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_help_names_the_gpu_algorithms_and_overlap():
    text = build_parser().format_help()
    for word in ("--overlap", "--gemm-size", "oneshot", "twoshot", "auto", "n/a", "_overlap.png"):
        assert word in text, word
