"""mpiring.bench.plot: figures from rows and from a saved CSV."""

from __future__ import annotations

import json

from mpiring.bench import plot, plot_overlap
from mpiring.bench.results import Row, write_csv
from mpiring.bench.stats import algbw, busbw

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def add_makespan(row: Row, t_us: float, hidden: float, train: bool) -> None:
    """The makespan columns of a row whose calls take ``t_us``: 100 calls, as many 1.7 ms GEMMs
    as nccl's calls take (the size's work), ``hidden`` of the shorter one hidden."""
    calls, gemm_us = 100, 1700.0
    gemms = max(1, round(calls * (10 + row.size_bytes / 125e3) / gemm_us))
    t_gemm, t_ar = gemms * gemm_us, calls * t_us
    row.overlap_gemms, row.overlap_calls, row.t_gemm_us, row.t_ar_us = gemms, calls, t_gemm, t_ar
    row.t_both_us = t_gemm + t_ar - hidden * min(t_gemm, t_ar)
    row.overlap_eff = hidden
    if train:
        row.train_t_gemm_us, row.train_t_ar_us = t_gemm, t_ar
        row.train_t_both_us = t_gemm + t_ar - 0.9 * hidden * min(t_gemm, t_ar)
        row.train_eff = 0.9 * hidden


def fake_rows(batches=("auto",), algos=("nccl", "ring", "nccl-ring"), overlap=False,
              makespan=False) -> list[Row]:
    rows = []
    for e in range(10, 31, 2):
        size = 1 << e
        for algo in algos:
            if algo == "oneshot" and size > 1 << 20:
                rows.append(Row(size, size // 4, "float32", "sum", algo, "-", "out", 4,
                                "inapplicable", "-", baseline="nccl"))
                continue
            for b in (batches if algo in ("ring", "nccl-ring") else ("-",)):
                k = 1 + (int(b) if b.isdigit() else 0) * 0.1
                t = (10 + size / 150e3 * (1.2 if algo == "nccl" else 1.0)) / k
                rows.append(Row(size, size // 4, "float32", "sum", algo, b, "out", 4, "ok", "OK",
                                time_us=t, mean_us=t, min_us=0.9 * t, max_us=1.2 * t,
                                std_us=0.05 * t, algbw_gbs=algbw(size, t * 1e-6),
                                busbw_gbs=busbw(size, t * 1e-6, 4), baseline="nccl",
                                speedup=(10 + size / 125e3) / t,
                                resolved="ring" if algo == "auto" else ""))
                if overlap:
                    rows[-1].gemm_slowdown = 1.3 if algo == "nccl" else 1.02
                    rows[-1].ar_slowdown = 1.8 if algo == "nccl" else 1.1
                if makespan:
                    add_makespan(rows[-1], t, hidden=0.4 if algo == "nccl" else 0.8,
                                 train=algo != "twoshot")
    rows.append(Row(1 << 32, 1 << 30, "float32", "sum", "ring", "auto", "out", 4, "skipped", "-"))
    return rows


SIX = ("nccl", "nccl-ring", "ring", "oneshot", "twoshot", "auto")


def _is_png(path) -> bool:
    return path.exists() and path.stat().st_size > 10_000 and path.read_bytes()[:8] == PNG_MAGIC


def test_plot_results_writes_main_figure(tmp_path):
    written = plot.plot_results(fake_rows(), {"gpu_names": ["NVIDIA H200"]}, tmp_path / "run")
    assert written == [tmp_path / "run.png"]
    assert _is_png(written[0])


def test_six_algorithms_and_the_overlap_figure(tmp_path):
    rows = fake_rows(algos=SIX, overlap=True)
    written = plot.plot_results(rows, {"overlap": "8192x8192 float16 GEMM"}, tmp_path / "run")
    assert [p.name for p in written] == ["run.png", "run_overlap.png"]
    assert all(_is_png(p) for p in written)
    series = plot.main_series(rows)
    assert [s[1] for s in series] == list(SIX)  # baselines first, auto last
    assert len({plot.line_style(a, "out", a)["color"] for a in SIX}) == 6
    assert plot.line_style("auto", "out", "x")["linestyle"] == ":"
    assert plot.line_style("some-new-algo", "in", "x")["linestyle"] == "--"


def test_makespan_figure_one_column_per_shape(tmp_path):
    rows = fake_rows(algos=SIX, overlap=True, makespan=True)
    meta = {"overlap_shapes": {"gemm": "8192x8192 float16 GEMMs (CuPy), 1.7 ms each alone",
                               "train": "4096x4096 bfloat16 GEMMs (torch)"}}
    written = plot.plot_results(rows, meta, tmp_path / "run")
    assert [p.name for p in written] == ["run.png", "run_overlap.png", "run_makespan.png"]
    assert all(_is_png(p) for p in written)
    assert plot_overlap.makespan_shapes(rows) == ["gemm", "train"]
    ref = plot_overlap.gemm_reference(rows, "gemm")
    assert [s for s, _ in ref] == sorted({r.size_bytes for r in rows if r.t_gemm_us})
    nccl_1m = next(r for r in rows if r.algo == "nccl" and r.size_bytes == 1 << 20)
    assert dict(ref)[1 << 20] == nccl_1m.t_gemm_us  # one work per size: every row's T_gemm
    only_train = [r for r in fake_rows(makespan=True)]
    for r in only_train:
        r.t_both_us = None
    assert plot_overlap.makespan_shapes(only_train) == ["train"]
    path = plot_overlap.plot_makespan(only_train, {}, tmp_path / "train.png")
    assert path is not None and _is_png(path)
    assert plot_overlap.plot_makespan(fake_rows(), {}, tmp_path / "none.png") is None


def test_replot_from_csv_draws_the_makespan(tmp_path, capsys):
    csv_path = write_csv(tmp_path / "saved.csv", fake_rows(makespan=True))
    assert plot.main([str(csv_path)]) == 0
    assert _is_png(tmp_path / "saved_makespan.png")
    assert str(tmp_path / "saved_makespan.png") in capsys.readouterr().out


def test_batch_sweep_figure_when_several_batches(tmp_path):
    written = plot.plot_results(fake_rows(batches=("1", "2", "4", "8")), {}, tmp_path / "run")
    assert [p.name for p in written] == ["run.png", "run_batches.png"]
    assert all(_is_png(p) for p in written)


def test_main_series_picks_auto_or_best():
    series = plot.main_series(fake_rows(batches=("auto", "2")))
    ring = [s for s in series if s[1] == "ring"][0]
    assert all(r.batches == "auto" for r in ring[3])
    series = plot.main_series(fake_rows(batches=("1", "8")))
    ring = [s for s in series if s[1] == "ring"][0]
    assert "best batches" in ring[0] and all(r.batches == "8" for r in ring[3])


def test_replot_from_csv_cli(tmp_path, capsys):
    csv_path = write_csv(tmp_path / "saved.csv", fake_rows())
    (tmp_path / "saved.json").write_text(json.dumps({"metadata": {"hostname": "h"}, "results": []}))
    assert plot.main([str(csv_path)]) == 0
    out = tmp_path / "saved.png"
    assert _is_png(out)
    assert str(out) in capsys.readouterr().out
    assert plot.main([str(csv_path), "-o", str(tmp_path / "custom")]) == 0
    assert _is_png(tmp_path / "custom.png")


def test_replot_without_timed_rows_fails(tmp_path):
    rows = [r for r in fake_rows() if r.status == "skipped"]
    csv_path = write_csv(tmp_path / "empty.csv", rows)
    assert plot.main([str(csv_path)]) == 1


def test_size_axis_labels(tmp_path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    plot.size_axis(ax, [1 << 10, 8 << 30])
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[-1] == "8\u2009GiB" and "KiB" in labels[0]
    assert all(s[-3:] in ("KiB", "MiB", "GiB") for s in labels) and 3 <= len(labels) <= 10
    plt.close(fig)


def test_each_collective_gets_its_own_figure_named_after_it(tmp_path):
    rows = []
    for collective in ("allreduce", "reduce_scatter", "allgather"):
        for r in fake_rows(algos=("nccl", "ring")):
            r.collective = collective
            rows.append(r)
    written = plot.plot_results(rows, {}, tmp_path / "run")
    assert written == [tmp_path / "run.png", tmp_path / "run_reduce_scatter.png",
                       tmp_path / "run_allgather.png"]
    assert all(_is_png(p) for p in written)
    # the default --name is the collective: no second suffix
    assert plot.collective_prefix(tmp_path / "allgather_vm_1", "allgather") == str(
        tmp_path / "allgather_vm_1")
    assert plot.collective_prefix("x/h200", "reduce_scatter") == "x/h200_reduce_scatter"
    assert plot.collective_prefix("x/h200", "allreduce") == "x/h200"


def test_baselines_are_named_by_their_collective():
    rows = fake_rows(algos=("nccl", "ring"))
    for r in rows:
        r.collective = "allgather"
    labels = [label for label, *_ in plot.main_series(rows)]
    assert labels[0] == "NCCL Allgather" and "mpiring ring" in labels


def test_rivals_plot_and_the_speedups_name_the_chosen_baseline(tmp_path, monkeypatch):
    """With --baseline torch the speed-up panel is against torch, and every rival has a style."""
    rows = fake_rows(algos=("torch", "nccl", "torch-symm-1shot", "nccl-symm", "ring"))
    for r in rows:
        r.baseline = "torch"
    figures = []
    monkeypatch.setattr(plot.plt, "close", figures.append)
    written = plot.plot_results(rows, {}, tmp_path / "rivals")
    assert written == [tmp_path / "rivals.png"] and _is_png(written[0])
    speedup_axis = figures[0].axes[2]
    assert speedup_axis.get_ylabel().startswith("speed-up vs torch")
    assert "torch.distributed all_reduce" in speedup_axis.get_title()
    labels = {line.get_label() for line in figures[0].axes[0].get_lines()}
    assert {"torch symm-mem one-shot", "NCCL symmetric window", "NCCL allreduce"} <= labels
