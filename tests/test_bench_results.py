"""mpiring.bench.results: CSV and JSON round trips."""

from __future__ import annotations

import csv
import json

import pytest

from mpiring.bench.results import FIELDS, MAKESPAN_COLUMNS, Row, read_csv, read_json, write_csv, write_json


def sample_rows() -> list[Row]:
    ok = Row(size_bytes=1 << 20, count=262144, dtype="float32", op="sum", algo="ring",
             batches="auto", placement="out", nranks=4, status="ok", check="OK",
             time_us=12.5, mean_us=12.75, min_us=12.0, max_us=14.0, std_us=0.5,
             algbw_gbs=83.886, busbw_gbs=125.83, speedup=1.25, baseline="nccl", iters=100,
             warmup=10, reps=5, slowest_rank=2)
    fail = Row(size_bytes=2048, count=512, dtype="float32", op="sum", algo="nccl-ring",
               batches="4", placement="in", nranks=4, status="fail", check="FAIL",
               baseline="nccl", note='rank 1: wrong result: 3 of 512 elements wrong, "x", y')
    skipped = Row(size_bytes=8 << 30, count=2 << 30, dtype="float32", op="sum", algo="nccl",
                  batches="-", placement="out", nranks=4, status="skipped", check="-",
                  note="needs 17 GiB")
    auto = Row(size_bytes=1 << 20, count=262144, dtype="float32", op="sum", algo="auto",
               batches="-", placement="out", nranks=4, status="ok", check="OK", time_us=10.0,
               resolved="twoshot", gemm_alone_us=1520.5, gemm_overlap_us=1601.25,
               gemm_slowdown=1.053, ar_alone_us=10.5, ar_overlap_us=14.0, ar_slowdown=1.333,
               overlap_gemms=8, overlap_calls=1300, t_gemm_us=12164.0, t_ar_us=13650.0,
               t_both_us=15002.5, overlap_eff=0.8889, train_gemms=65, train_calls=1300,
               train_t_gemm_us=13000.0, train_t_ar_us=13650.0, train_t_both_us=14800.0,
               train_eff=0.9115, ar_sms=None, ar_sms_source="all: its kernels launch the grid")
    na = Row(size_bytes=1 << 30, count=1 << 28, dtype="float32", op="sum", algo="oneshot",
             batches="-", placement="out", nranks=4, status="inapplicable", check="-",
             note="rank 0: InvalidArgumentError: oneshot takes at most 1 MiB")
    gather = Row(size_bytes=1 << 20, count=65536, dtype="float32", op="sum", algo="mpi",
                 batches="-", placement="in", nranks=4, status="ok", check="OK",
                 collective="allgather", wrong=0, time_us=20.0)
    return [ok, fail, skipped, auto, na, gather]


def test_csv_round_trip(tmp_path):
    rows = sample_rows()
    path = write_csv(tmp_path / "r.csv", rows)
    assert read_csv(path) == rows
    with path.open() as f:
        header = next(csv.reader(f))
    assert header == FIELDS


def test_csv_has_one_line_per_row_and_empty_missing_values(tmp_path):
    path = write_csv(tmp_path / "r.csv", sample_rows())
    with path.open(newline="") as f:
        recs = list(csv.DictReader(f))
    assert len(recs) == 6 and recs[-1]["collective"] == "allgather"
    assert recs[1]["time_us"] == "" and recs[1]["check"] == "FAIL"
    assert (recs[3]["resolved"], recs[3]["gemm_slowdown"]) == ("twoshot", "1.053")
    assert recs[0]["resolved"] == "" and recs[0]["gemm_slowdown"] == ""
    assert recs[4]["status"] == "inapplicable"  # not "n/a": CSV readers take that for missing
    assert float(recs[0]["busbw_gbs"]) == pytest.approx(125.83)


def test_json_round_trip_with_metadata(tmp_path):
    rows = sample_rows()
    meta = {"hostname": "node1", "world_size": 4, "gpu_names": ["NVIDIA H200"]}
    path = write_json(tmp_path / "r.json", rows, meta)
    back, meta_back = read_json(path)
    assert back == rows and meta_back == meta
    doc = json.loads(path.read_text())
    assert doc["fields"] == FIELDS and len(doc["results"]) == 6
    assert [r["collective"] for r in doc["results"]] == ["allreduce"] * 5 + ["allgather"]


def test_json_never_writes_nan(tmp_path):
    row = sample_rows()[0]
    row.busbw_gbs = float("nan")
    path = write_json(tmp_path / "r.json", [row], {})
    assert "NaN" not in path.read_text()
    assert read_json(path)[0][0].busbw_gbs is None


def test_reads_csv_of_older_runs_without_the_new_columns(tmp_path):
    path = write_csv(tmp_path / "r.csv", sample_rows()[:1])
    with path.open(newline="") as f:
        recs = list(csv.DictReader(f))
    old = [k for k in FIELDS if k not in ("resolved", "collective")
           and not k.startswith(("gemm_", "ar_", "t_", "train_", "overlap_"))]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=old, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(recs)
    back = read_csv(path)[0]
    assert back.time_us == 12.5 and back.resolved == "" and back.gemm_slowdown is None
    assert back.collective == "allreduce"  # runs from before --collective
    assert back.t_both_us is None and back.ar_sms_source == ""  # ... and before the makespan


def test_the_makespan_columns_keep_their_types_and_units(tmp_path):
    path = write_csv(tmp_path / "r.csv", sample_rows())
    with path.open(newline="") as f:
        rec = list(csv.DictReader(f))[3]
    assert (rec["overlap_gemms"], rec["t_both_us"], rec["overlap_eff"]) == ("8", "15002.5", "0.8889")
    assert (rec["train_calls"], rec["ar_sms"], rec["ar_sms_source"]) == (
        "1300", "", "all: its kernels launch the grid")
    back = read_csv(path)[3]
    assert isinstance(back.overlap_gemms, int) and isinstance(back.train_t_both_us, float)
    for cols in MAKESPAN_COLUMNS.values():
        assert all(c in FIELDS for c in cols)
        assert all(c.endswith("_us") for c in (cols.t_gemm, cols.t_ar, cols.t_both))
    assert FIELDS[-1] == "note"


def test_read_csv_rejects_other_files(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an mpiring.bench CSV"):
        read_csv(path)
