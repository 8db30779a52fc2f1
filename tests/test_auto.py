"""The tuning table behind algorithm="auto": parsing, choosing, building from timings."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.algorithms import auto_candidates, get
from mpiring.auto import table as tuning
from mpiring.auto.machine import MachineKey
from mpiring.core.errors import InvalidArgumentError


def table(rows: dict) -> tuning.TuningTable:
    return tuning.parse({"format": 1, "tables": rows})


def test_choose_takes_the_first_entry_that_fits() -> None:
    t = table({"4": [[1024, "oneshot"], [1 << 20, "twoshot"], [None, "ring"]]})
    assert t.choose(4, 1) == "oneshot"
    assert t.choose(4, 1024) == "oneshot"
    assert t.choose(4, 1025) == "twoshot"
    assert t.choose(4, 1 << 20) == "twoshot"
    assert t.choose(4, (1 << 20) + 1) == "ring"


def test_last_entry_covers_larger_sizes_even_with_a_limit() -> None:
    assert table({"2": [[1024, "oneshot"], [4096, "nccl"]]}).choose(2, 1 << 30) == "nccl"


def test_rank_counts_without_a_table_use_the_builtin_rule() -> None:
    t = table({"4": [[None, "nccl"]]})
    for nbytes in (1, 1 << 16, 1 << 24, 1 << 30):
        assert t.choose(3, nbytes) == tuning.builtin_choice(3, nbytes)


@pytest.mark.parametrize(("rows", "message"), [
    ({"4": [[10, "oneshot"], [5, "ring"]]}, "increasing"),
    ({"4": [[10, "bogus"]]}, "unknown algorithm"),
    ({"4": [[None, "ring"], [10, "oneshot"]]}, "only the last"),
    ({"x": [[None, "ring"]]}, "not an integer"),
    ({"4": [[10]]}, "max_bytes, algorithm"),
    ({"4": [[True, "ring"]]}, "increasing"),
])
def test_bad_tables_are_refused_with_the_reason(rows: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        table(rows)


def test_wrong_format_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="format"):
        tuning.parse({"format": 99, "tables": {}})


def test_shipped_table_loads_and_covers_two_and_four_ranks() -> None:
    t = tuning.load()
    assert {2, 4} <= set(t.tables)
    for world in (2, 4):
        assert t.tables[world][-1][0] is None
        for nbytes in (1 << 10, 1 << 20, 1 << 30, 8 << 30):
            assert t.choose(world, nbytes) in auto_candidates()


def test_load_from_the_environment(tmp_path, monkeypatch) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"format": 1, "tables": {"4": [[None, "nccl"]]}}))
    monkeypatch.setenv("MPIRING_TUNING_FILE", str(path))
    assert tuning.load().choose(4, 123) == "nccl"
    path.write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="not valid JSON"):
        tuning.load()
    monkeypatch.setenv("MPIRING_TUNING_FILE", str(tmp_path / "missing.json"))
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        tuning.load()


def test_json_round_trip() -> None:
    t = table({"4": [[1024, "oneshot"], [None, "ring"]], "2": [[None, "twoshot"]]})
    assert tuning.parse(json.loads(json.dumps(tuning.to_json(t)))) == t


def test_from_timings_picks_the_fastest_and_merges_runs() -> None:
    times = [(4, 1024, "oneshot", 5e-6), (4, 1024, "nccl", 9e-6),
             (4, 2048, "oneshot", 6e-6), (4, 2048, "twoshot", 7e-6),
             (4, 4096, "twoshot", 8e-6), (4, 4096, "oneshot", 9e-6),
             (4, 8192, "ring", 1e-5), (4, 8192, "twoshot", 2e-5)]
    assert tuning.from_timings(times) == {4: ((2048, "oneshot"), (4096, "twoshot"), (None, "ring"))}


def test_one_size_won_narrowly_between_two_won_by_another_keeps_their_winner() -> None:
    # 4 x H200 eager (results/h200x4-small-a280745.csv): oneshot-ll's 8 KiB median was noisy
    times = [(4, 4096, "oneshot-ll", 7.13), (4, 4096, "oneshot", 10.19),
             (4, 8192, "oneshot-ll", 10.67), (4, 8192, "oneshot", 10.39),
             (4, 16384, "oneshot-ll", 7.53), (4, 16384, "oneshot", 10.41)]
    assert tuning.from_timings(times) == {4: ((None, "oneshot-ll"),)}
    clear = [(w, n, a, 9.0 if (n, a) == (8192, "oneshot") else t) for w, n, a, t in times]
    assert tuning.from_timings(clear) == {4: ((4096, "oneshot-ll"), (8192, "oneshot"), (None, "oneshot-ll"))}


def test_the_first_and_last_sizes_keep_their_fastest() -> None:
    times = [(2, 1024, "oneshot", 1.00), (2, 1024, "twoshot", 1.01),
             (2, 2048, "twoshot", 1.0), (2, 2048, "oneshot", 2.0),
             (2, 4096, "oneshot", 1.00), (2, 4096, "twoshot", 1.01)]
    assert tuning.from_timings(times) == {2: ((1024, "oneshot"), (2048, "twoshot"), (None, "oneshot"))}


@given(st.lists(st.tuples(st.integers(1, 1 << 33), st.sampled_from(auto_candidates()),
                          st.floats(1e-7, 1.0)), min_size=1, max_size=60))
def test_from_timings_picks_within_noise_of_the_fastest_at_every_measured_size(points) -> None:
    tables = tuning.from_timings([(4, n, a, t) for n, a, t in points])
    t = tuning.TuningTable(tables)
    times: dict[int, dict[str, float]] = {}
    for n, a, sec in points:
        times.setdefault(n, {})[a] = min(sec, times.get(n, {}).get(a, float("inf")))
    ends = (min(times), max(times))
    for n, at in times.items():
        chosen, fastest = t.choose(4, n), min(at.values())
        assert chosen in at and at[chosen] <= (1 + tuning.NOISE) * fastest
        if n in ends:  # no neighbour on one side: the fastest
            assert at[chosen] == fastest
    assert tuning.parse(tuning.to_json(t)) == t  # what from_timings builds is a valid table


def test_from_timings_refuses_non_candidates() -> None:
    with pytest.raises(InvalidArgumentError, match="cannot tune"):
        tuning.from_timings([(4, 1, "nccl-ring", 1.0)])


class _FakeGpu:
    """What auto asks a GPU backend: the one-shot limit, and (counted) whether it is capturing."""

    def __init__(self, capturing: bool, oneshot_limit: int = 1 << 20) -> None:
        self._capturing, self.asked = capturing, 0
        self.direct = SimpleNamespace(oneshot_limit=oneshot_limit, ll_limit=64 << 10)

    def capturing(self) -> bool:
        self.asked += 1
        return self._capturing

    def nccl_unavailable(self) -> str | None:
        return None


def _auto(gpu: _FakeGpu, nbytes: int, rows: dict, nodes: int = 1) -> str:
    from mpiring.algorithms import Collective
    from mpiring.call.dispatch import Dispatcher
    from mpiring.core.buffers import Memory
    from mpiring.core.topology import from_node_keys

    topo = from_node_keys([n for n in range(nodes) for _ in range(2)])  # two ranks per node
    dispatch = Dispatcher("auto", None, None, table(rows), topo, host=None, gpu=gpu)
    return dispatch._auto_choice(nbytes, Memory.CUDA, Collective.ALLREDUCE)


def test_auto_asks_about_graph_capture_only_for_a_row_that_cannot_be_captured() -> None:
    """The hot path: a capturable choice costs no CUDA query; the ring's does, and while
    capturing the ring gives way to the next capturable candidate."""
    rows = {"2": [[4096, "oneshot"], [None, "ring"]]}
    eager = _FakeGpu(capturing=False)
    assert _auto(eager, 1024, rows) == "oneshot" and eager.asked == 0
    assert _auto(eager, 1 << 30, rows) == "ring" and eager.asked == 1
    graph = _FakeGpu(capturing=True)
    assert _auto(graph, 1 << 30, rows) == "twoshot"


def test_auto_moves_past_a_size_limit() -> None:
    gpu = _FakeGpu(capturing=False, oneshot_limit=1024)
    assert _auto(gpu, 4096, {"2": [[1 << 20, "oneshot"], [None, "ring"]]}) == "twoshot"


def test_auto_runs_hier_across_nodes() -> None:
    gpu = _FakeGpu(capturing=False)
    assert _auto(gpu, 1024, {"2": [[None, "oneshot"]]}, nodes=2) == "hier"
    assert gpu.asked == 0


# -- format 2: tables keyed by machine, eager and graph entries --------------------------------

H200_2 = MachineKey("NVIDIA H200", 2, "nvlink")


def table2(rows: dict, gpu: str | None = "NVIDIA H200", link: str | None = "nvlink") -> tuning.TuningTable:
    return tuning.parse({"format": 2, "gpu": gpu, "link": link, "tables": rows})


def test_graph_entries_serve_captured_calls_and_eager_ones_the_rest() -> None:
    t = table2({"2": {"eager": [[4096, "nccl"], [None, "ring"]],
                      "graph": [[1 << 20, "oneshot"], [None, "twoshot"]]},
                "4": {"eager": [[None, "twoshot"]]}})
    assert t.choose(2, 1024) == "nccl" and t.choose(2, 1024, graph=True) == "oneshot"
    assert t.choose(2, 1 << 30) == "ring" and t.choose(2, 1 << 30, graph=True) == "twoshot"
    assert t.choose(4, 1024, graph=True) == "twoshot"  # no graph entries: eager serves graphs
    assert t.choose(3, 1024, graph=True) == tuning.builtin_choice(3, 1024)
    assert t.differs(2, 1024) and t.differs(2, 1 << 30) and not t.differs(4, 1024)


def test_a_table_covers_its_machine_only() -> None:
    t = table2({"2": {"eager": [[None, "nccl"]]}})
    assert t.covers(H200_2)
    assert not t.covers(H200_2._replace(ranks=4))  # no entries for 4 ranks
    assert not t.covers(H200_2._replace(link="pcie"))
    assert not t.covers(H200_2._replace(gpu="NVIDIA H100"))
    anything = table2({"2": {"eager": [[None, "nccl"]]}}, gpu=None, link=None)
    assert anything.covers(H200_2._replace(gpu="NVIDIA H100", link="pcie"))
    old = table({"2": [[None, "nccl"]]})  # format 1: any GPU, any link
    assert (old.gpu, old.link, old.graph) == (None, None, {}) and old.covers(H200_2)
    assert t.describe_machine() == "NVIDIA H200, nvlink, 2 ranks"
    assert table({"1": [[None, "ring"]], "2": [[None, "ring"]], "8": [[None, "ring"]]}) \
        .describe_machine() == "any GPU, any link, 1, 2 and 8 ranks"


@pytest.mark.parametrize(("data", "message"), [
    ({"2": [[None, "ring"]]}, 'must be {"eager"'),
    ({"2": {"graph": [[None, "nccl"]]}}, 'must be {"eager"'),
    ({"2": {"eager": [[None, "nccl"]], "grpah": []}}, "unknown key 'grpah'"),
    ({"2": {"eager": [[None, "nccl"]], "graph": [[None, "ring"]]}}, "cannot be captured"),
    ({"2": {"eager": [], "graph": [[None, "nccl"]]}}, "graph entries but no eager"),
    ({"2": {"eager": "nccl"}}, "must be a list"),
    ({"2": {"eager": [[10, "nccl"], [5, "ring"]]}}, "sizes for 2 ranks must be increasing"),
    ({"2": {"eager": [[None, "nccl"]], "graph": [[None, "bogus"]]}}, "for 2 ranks (graph)"),
    ({"0": {"eager": [[None, "nccl"]]}}, "at least 1"),
])
def test_bad_format_2_tables_are_refused_with_the_reason(data: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        table2(data)


@pytest.mark.parametrize("doc", [{"format": 2, "gpu": 7, "tables": {}},
                                 {"format": 2, "link": "", "tables": {}},
                                 {"format": 2, "tables": [["2", []]]},
                                 {"format": True, "tables": {}}, ["format", 2]])
def test_bad_labels_and_shapes_are_refused(doc) -> None:
    with pytest.raises(InvalidArgumentError, match="tuning table|must"):
        tuning.parse(doc, "t.json")


def test_errors_name_the_file(tmp_path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"format": 2, "tables": {"2": {"eager": [[1, "warp"]]}}}))
    with pytest.raises(InvalidArgumentError, match=f"{re.escape(str(path))}: unknown algorithm 'warp'"):
        tuning.load(path)


# Ladders as a tuner could write them: increasing limits, any candidates, the last one open or not.
LADDERS = st.lists(st.tuples(st.integers(1, 1 << 34), st.sampled_from(auto_candidates())),
                   min_size=1, max_size=12, unique_by=lambda e: e[0]).map(
    lambda rows: sorted(rows)).flatmap(
    lambda rows: st.booleans().map(lambda open_end: [[m, a] for m, a in rows[:-1]]
                                   + [[None if open_end else rows[-1][0], rows[-1][1]]]))
CAPTURABLE = [a for a in auto_candidates() if get(a).graph_capturable]


def _index(entries, nbytes: int) -> int:
    return next((i for i, (m, _) in enumerate(entries) if m is None or nbytes <= m), len(entries) - 1)


@given(LADDERS, st.lists(st.integers(0, 1 << 36), min_size=2, max_size=20))
def test_choose_covers_every_size_and_is_monotone_in_size(rows, sizes) -> None:
    """Every size gets a candidate, and a larger message never goes back to an earlier entry."""
    t = table2({"3": {"eager": rows}})
    entries = t.tables[3]
    previous = -1
    for nbytes in sorted(sizes):
        assert t.choose(3, nbytes) in auto_candidates()
        assert t.choose(3, nbytes) == entries[_index(entries, nbytes)][1]
        assert _index(entries, nbytes) >= previous
        previous = _index(entries, nbytes)


@given(LADDERS, LADDERS.filter(lambda rows: all(a in CAPTURABLE for _, a in rows)),
       st.sampled_from([None, "NVIDIA H200"]), st.sampled_from([None, "pcie"]))
def test_format_2_round_trip(eager, graph, gpu, link) -> None:
    t = table2({"2": {"eager": eager, "graph": graph}, "5": {"eager": eager}}, gpu, link)
    again = tuning.parse(json.loads(json.dumps(tuning.to_json(t))))
    assert again == t and again.graph.keys() == {2}
    for nbytes in (0, 1, 4096, 1 << 20, 1 << 40):
        assert again.choose(2, nbytes, graph=True) == tuning.pick(t.graph[2], nbytes)


# -- overlap entries: the smallest makespan beside a GEMM (overlap=True) ---------------------------

OVERLAPPED = {"2": {"eager": [[4096, "nccl"], [None, "twoshot"]],
                    "graph": [[1 << 20, "oneshot"], [None, "nccl"]],
                    "overlap": [[65536, "oneshot"], [None, "ring"]]},
              "4": {"eager": [[None, "twoshot"]], "graph": [[None, "nccl"]]},
              "8": {"eager": [[None, "twoshot"]], "overlap": [[1024, "nccl"], [None, "ring"]]}}


def test_overlap_entries_serve_overlapped_calls_only() -> None:
    t = table2(OVERLAPPED)
    assert t.choose(2, 1024, overlap=True) == "oneshot" and t.choose(2, 1024) == "nccl"
    assert t.choose(2, 1 << 30, overlap=True) == "ring" and t.choose(2, 1 << 30) == "twoshot"
    assert t.choose(2, 1024, graph=True) == "oneshot" and t.choose(2, 1 << 30, graph=True) == "nccl"
    # 4 ranks have no overlap entries: overlap=True picks as eager and graph calls do
    for nbytes in (1, 1 << 20, 1 << 40):
        for graph in (False, True):
            assert t.choose(4, nbytes, graph=graph, overlap=True) == t.choose(4, nbytes, graph=graph)
    assert t.choose(3, 1024, overlap=True) == tuning.builtin_choice(3, 1024)  # no table at all
    assert (t.has_overlap(2), t.has_overlap(4), t.has_overlap(8), t.has_overlap(3)) == \
        (True, False, True, False)


def test_overlap_entries_serve_from_the_smallest_size_they_measured() -> None:
    """A makespan run of 64 MiB to 1 GiB says nothing of 8 KiB: below overlap_from an
    overlapped call picks as any other, eager or in a capture."""
    t = table2({"2": {"eager": [[65536, "oneshot"], [None, "twoshot"]],
                      "graph": [[65536, "oneshot-ll"], [None, "nccl"]],
                      "overlap": [[None, "ring"]], "overlap_from": 64 << 20}})
    for nbytes in (1, 8192, (64 << 20) - 1):
        for graph in (False, True):
            assert t.choose(2, nbytes, graph=graph, overlap=True) == t.choose(2, nbytes, graph=graph)
    assert t.choose(2, 64 << 20, overlap=True) == t.choose(2, 8 << 30, overlap=True) == "ring"
    assert t.choose(2, 64 << 20, graph=True, overlap=True) == "nccl"  # the ring cannot be captured
    assert t.differs(2, 8192, overlap=True) == t.differs(2, 8192)  # as a plain call below
    assert t.overlap_from == {2: 64 << 20} and tuning.parse(tuning.to_json(t)) == t
    assert tuning.to_json(t)["tables"]["2"]["overlap_from"] == 64 << 20


def test_overlap_starts_only_where_the_sweep_beside_compute_began_above_the_eager_one() -> None:
    eager = [(2, 1024, "nccl", 1.0), (2, 1 << 20, "nccl", 1.0), (4, 1024, "nccl", 1.0)]
    beside = [(2, 64 << 20, "ring", 1.0), (2, 1 << 30, "nccl", 1.0), (4, 1024, "ring", 1.0)]
    assert tuning.overlap_starts(eager, beside) == {2: 64 << 20}  # 4 ranks: both from 1 KiB


@pytest.mark.parametrize(("value", "message"), [
    (0, "must be a size in bytes of at least 1, got 0"),
    (-5, "must be a size in bytes of at least 1"),
    (True, "must be a size in bytes of at least 1, got True"),
    ("64M", "must be a size in bytes of at least 1, got '64M'"),
    (1.5, "must be a size in bytes of at least 1, got 1.5"),
])
def test_a_bad_overlap_from_is_refused_naming_it(value, message) -> None:
    with pytest.raises(InvalidArgumentError, match=f"overlap_from for 2 ranks {re.escape(message)}"):
        table2({"2": {"eager": [[None, "nccl"]], "overlap": [[None, "ring"]], "overlap_from": value}})


def test_overlap_from_without_overlap_entries_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="2 ranks have overlap_from but no overlap entries"):
        table2({"2": {"eager": [[None, "nccl"]], "overlap_from": 1024}})


def test_while_capturing_an_overlap_pick_that_cannot_be_captured_gives_way_to_the_graph_choice() -> None:
    t = table2(OVERLAPPED)
    assert t.choose(2, 1024, graph=True, overlap=True) == "oneshot"  # capturable: kept
    assert t.choose(2, 1 << 30, graph=True, overlap=True) == "nccl"  # ring: the graph entries'
    # no graph entries for 8 ranks: the graph choice is the eager one
    assert t.choose(8, 1 << 30, graph=True, overlap=True) == "twoshot"
    assert t.choose(8, 512, graph=True, overlap=True) == "nccl"


def test_differs_for_overlapped_calls() -> None:
    t = table2(OVERLAPPED)
    assert t.differs(2, 1 << 30, overlap=True)  # ring outside, nccl inside a capture
    assert not t.differs(2, 1024, overlap=True)  # oneshot both ways
    assert t.differs(2, 1024) and t.differs(2, 1 << 30)  # overlap=False: today's answers
    assert not t.differs(8, 1 << 30)  # no graph entries: eager both ways
    assert t.differs(8, 1 << 30, overlap=True)  # ring outside, the eager twoshot inside
    assert not t.differs(8, 512, overlap=True)  # nccl both ways
    assert t.differs(4, 1024, overlap=True) and t.differs(4, 1024)  # no overlap entries: as today


@pytest.mark.parametrize(("data", "message"), [
    ({"2": {"eager": [[None, "nccl"]], "overlap": [[None, "bogus"]]}}, "for 2 ranks (overlap)"),
    ({"2": {"eager": [[None, "nccl"]], "overlap": [[10, "nccl"], [5, "ring"]]}},
     "sizes for 2 ranks (overlap) must be increasing"),
    ({"2": {"eager": [[None, "nccl"]], "overlap": [[None, "ring"], [10, "nccl"]]}},
     "only the last entry for 2 ranks (overlap)"),
    ({"2": {"eager": [[None, "nccl"]], "overlap": "ring"}}, "must be a list"),
    ({"2": {"eager": [], "overlap": [[None, "ring"]]}}, "overlap entries but no eager"),
    ({"2": {"eager": [[None, "nccl"]], "overlaps": []}},
     "unknown key 'overlaps' in the table for 2 ranks (expected 'eager', 'graph', 'overlap' or "
     "'overlap_from')"),
    ({"2": {"overlap": [[None, "nccl"]]}}, 'must be {"eager"'),
])
def test_bad_overlap_ladders_are_refused_with_the_reason(data: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        table2(data)


def test_an_overlap_ladder_may_hold_the_ring_and_may_be_empty_or_null() -> None:
    t = table2({"2": {"eager": [[None, "nccl"]], "overlap": [[None, "ring"]]},
                "4": {"eager": [[None, "nccl"]], "overlap": []},
                "8": {"eager": [[None, "nccl"]], "overlap": None}})
    assert t.overlap == {2: ((None, "ring"),)}
    assert "overlap" not in tuning.to_json(t)["tables"]["4"]


def test_the_docstrings_format_2_example_parses() -> None:
    doc = tuning.__doc__ or ""
    start = doc.index('"tables": {"2"')
    text = "{" + doc[start:doc.index("}}}", start) + 3]
    t = tuning.parse({"format": 2, **json.loads(text)})
    assert t.has_overlap(2) and t.choose(2, 128 << 20, overlap=True) == "ring"
    assert t.choose(2, 1024, overlap=True) == t.choose(2, 1024) == "nccl"  # below overlap_from


@given(LADDERS, LADDERS.filter(lambda rows: all(a in CAPTURABLE for _, a in rows)), LADDERS,
       st.sampled_from([None, "NVIDIA H200"]), st.booleans())
def test_format_2_round_trip_with_overlap(eager, graph, overlap, gpu, with_graph) -> None:
    rows = {"2": {"eager": eager, "overlap": overlap, **({"graph": graph} if with_graph else {})},
            "6": {"eager": eager}}
    t = table2(rows, gpu)
    doc = tuning.to_json(t)
    assert list(doc["tables"]["2"]) == ["eager", *(["graph"] if with_graph else []), "overlap"]
    again = tuning.parse(json.loads(json.dumps(doc)))
    assert again == t and again.overlap.keys() == {2} and not again.has_overlap(6)
    assert again.overlap[2] == tuple((m, a) for m, a in overlap)


@given(LADDERS, LADDERS.filter(lambda rows: all(a in CAPTURABLE for _, a in rows)), LADDERS,
       st.booleans(), st.lists(st.integers(0, 1 << 36), min_size=1, max_size=10))
def test_overlap_entries_change_overlapped_calls_only(eager, graph, overlap, with_graph,
                                                      sizes) -> None:
    """overlap=False picks exactly as a table without overlap entries; overlap=True picks the
    overlap ladder's entry, save inside a capture where it cannot be captured; differs() says
    whether the two sides of a capture pick otherwise."""
    base = {"eager": eager, **({"graph": graph} if with_graph else {})}
    plain, t = table2({"2": base}), table2({"2": {**base, "overlap": overlap}})
    for nbytes in sizes:
        mine = tuning.pick(t.overlap[2], nbytes)
        for capture in (False, True):
            assert t.choose(2, nbytes, graph=capture) == plain.choose(2, nbytes, graph=capture)
            want = mine if not capture or get(mine).graph_capturable else \
                plain.choose(2, nbytes, graph=True)
            assert t.choose(2, nbytes, graph=capture, overlap=True) == want
        assert t.differs(2, nbytes) == plain.differs(2, nbytes)
        assert t.differs(2, nbytes, overlap=True) == (
            t.choose(2, nbytes, graph=True, overlap=True) != t.choose(2, nbytes, overlap=True))


def _with_runs(runs: object) -> dict:
    return {"format": 2, "runs": runs, "tables": {"2": {"eager": [[None, "ring"]]}}}


def test_the_sm_budget_a_rank_count_was_measured_under() -> None:
    """The tuner's flat ``runs`` entry, or the shipped builder's per-sweep one; none: no budget."""
    table = tuning.parse(_with_runs({"2": {"sm_budget": 16}, "4": {"eager": {"sm_budget": 8}},
                                   "8": {"sm_budget": None}}))
    assert [table.sm_budget(n) for n in (2, 4, 8, 3)] == [16, 8, None, None]
    assert tuning.parse(_with_runs(None)).sm_budget(2) is None
    assert tuning.load().sm_budget(2) is None  # the shipped table: measured without a budget


@pytest.mark.parametrize("runs, message", [
    ({"2": {"sm_budget": 0}}, "runs for 2 ranks: sm_budget 0 is not a positive number of SMs"),
    ({"2": {"sm_budget": "16"}}, "runs for 2 ranks: sm_budget '16'"),
    ({"2": {"sm_budget": True}}, "runs for 2 ranks: sm_budget True"),
    ({"4": {"eager": {"sm_budget": -1}}}, "runs for 4 ranks: sm_budget -1"),
    ([1, 2], '"runs" must map rank counts'),
])
def test_a_bad_recorded_sm_budget_is_refused(runs: object, message: str) -> None:
    """Auto looks tables up by their budget: a typo must not pass as "measured without one"."""
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        tuning.parse(_with_runs(runs), "t.json")


def test_every_fallback_is_a_row_that_serves_what_it_is_named_for() -> None:
    """auto's fallbacks (mpiring.auto.fallbacks) name rows of the table; the flat rows across
    nodes serve the memory they stand for and run across nodes."""
    from mpiring import algorithms
    from mpiring.auto import fallbacks
    from mpiring.core.buffers import Memory as Mem

    names = set(algorithms.names())
    assert set(fallbacks.names()) <= names, set(fallbacks.names()) - names
    for memory, name in fallbacks.ACROSS_NODES_OTHER.items():
        row = algorithms.get(name)
        assert row.serves(memory) and row.runs_on(2)
    assert algorithms.get(fallbacks.ACROSS_NODES).runs_on(2)
    assert algorithms.get(fallbacks.WHILE_CAPTURING).graph_capturable
    assert all(algorithms.get(n).serves(Mem.CUDA) for n in (*fallbacks.ONE_RANK, *fallbacks.THEN))


def test_a_size_measured_twice_keeps_its_fastest_time() -> None:
    """A results file may hold several rows of one size and algorithm (batches, placements):
    the fastest counts, whatever their order."""
    times = [(2, 1024, "oneshot", 1.0), (2, 1024, "twoshot", 2.0), (2, 1024, "oneshot", 3.0)]
    assert tuning.from_timings(times) == tuning.from_timings(times[::-1]) == {2: ((None, "oneshot"),)}


def test_a_narrow_loss_of_exactly_the_noise_still_keeps_the_neighbours_winner() -> None:
    times = [(2, 1, "oneshot", 1.0), (2, 2, "twoshot", 1.0), (2, 2, "oneshot", 1.0 + tuning.NOISE),
             (2, 3, "oneshot", 1.0)]
    assert tuning.from_timings(times) == {2: ((None, "oneshot"),)}
    times[2] = (2, 2, "oneshot", 1.0 + 2 * tuning.NOISE)
    assert tuning.from_timings(times) == {2: ((1, "oneshot"), (2, "twoshot"), (None, "oneshot"))}


@pytest.mark.parametrize(("ranks", "nbytes", "want"), [
    (2, 256 << 10, "oneshot"), (2, (256 << 10) + 1, "twoshot"), (4, 256 << 10, "oneshot"),
    (8, 128 << 10, "oneshot"), (8, (128 << 10) + 1, "twoshot"),
    (2, 64 << 20, "twoshot"), (2, (64 << 20) + 1, "ring"), (1, 1, "ring")])
def test_the_rule_for_untabled_machines_at_its_boundaries(ranks: int, nbytes: int, want: str) -> None:
    assert tuning.builtin_choice(ranks, nbytes) == want
