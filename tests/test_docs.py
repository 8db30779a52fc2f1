"""The README and the docs pages against what they describe (issue 26): the README stays short;
every results table generated from a committed CSV equals what the generator prints for that CSV
today; the README's test command is the one CI runs; the README's examples are excerpts of the
programs tests/test_examples.py runs; links between the pages resolve; mkdocs' nav lists every
page; user text carries no history (that is CHANGELOG.md's)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
         for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
GENERATED = re.compile(r"<!-- generated: (python docs/gen_results_table\.py [^>]*?) -->\n"
                       r"(.*?)\n\n<!-- end generated -->", re.DOTALL)


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) < 200, len(README.splitlines())


def generated_tables() -> list[tuple[str, str, str]]:
    return [(page, m.group(1), m.group(2)) for page, text in PAGES.items() for m in GENERATED.finditer(text)]


def test_the_readme_holds_one_generated_results_table() -> None:
    tables = [t for t in generated_tables() if t[0] == "README.md"]
    assert len(tables) == 1, tables
    assert "results/h200x4-785a13a.csv" in tables[0][1]  # the newest full 4-GPU run


@pytest.mark.parametrize(("page", "command", "text"), generated_tables(),
                         ids=[f"{page}:{command.split()[2]}" for page, command, _ in generated_tables()])
def test_each_generated_table_is_what_the_script_prints_for_the_committed_csv(page: str, command: str,
                                                                             text: str) -> None:
    argv = shlex.split(command)
    assert argv[:2] == ["python", "docs/gen_results_table.py"]
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert text == done.stdout.rstrip("\n"), (
        f"{page}: the table under '{command}' differs from the script's output; paste:\n{done.stdout}")


def test_the_generator_marks_the_fastest_row_and_refuses_missing_sizes(tmp_path: Path) -> None:
    csv = tmp_path / "run.csv"
    csv.write_text("size_bytes,dtype,op,algo,placement,status,time_us,speedup,baseline,resolved\n"
                   "1024,float32,sum,nccl,out,ok,10.0,1.0,nccl,\n"
                   "1024,float32,sum,auto,out,ok,4.0,2.5,nccl,ring\n"
                   "1024,float32,sum,ring,out,ok,5.0,2.0,nccl,\n"
                   "1024,float32,sum,oneshot,out,inapplicable,,,nccl,\n")
    script = [sys.executable, str(ROOT / "docs" / "gen_results_table.py"), str(csv)]
    out = subprocess.run([*script, "--sizes", "1K"], capture_output=True, text=True, check=True).stdout
    assert "| 1 KiB | 10.0 µs | 4.0 µs (2.50×, ring) | n/a | **5.0 µs (2.00×)** |" in out, out
    assert "commit not recorded in the file" in out
    missing = subprocess.run([*script, "--sizes", "2K"], capture_output=True, text=True)
    assert missing.returncode != 0 and "no rows at 2 KiB" in missing.stderr


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = re.search(r"^test_command='(.*)'$", ci, re.MULTILINE).group(1)
    line = next(line for line in README.splitlines() if line.startswith("python -m pip install")
                and "pytest" in line)
    assert line == "python -m pip install -e '.[mpi,test,bench]' && " + command


def readme_examples() -> list[tuple[str, list[str]]]:
    blocks = re.findall(r"```python\n# (examples/[\w.]+\.py)[;:].*?\n(.*?)```", README, re.DOTALL)
    return [(name, [line.strip() for line in code.splitlines() if line.strip()]) for name, code in blocks]


def test_the_readme_shows_each_tested_example() -> None:
    assert sorted(name for name, _ in readme_examples()) == [
        "examples/cupy_allreduce.py", "examples/numpy_allreduce.py", "examples/torch_allreduce.py"]


@pytest.mark.parametrize(("name", "lines"), readme_examples(), ids=[name for name, _ in readme_examples()])
def test_each_readme_example_is_an_excerpt_of_the_program(name: str, lines: list[str]) -> None:
    """Every line of the README's excerpt is a line of the example, in the example's order."""
    source = [line.strip() for line in (ROOT / name).read_text(encoding="utf-8").splitlines()]
    at = 0
    for line in lines:
        try:
            at = source.index(line, at) + 1
        except ValueError:
            pytest.fail(f"README's excerpt of {name}: {line!r} is not in the program (after line {at})")
    assert 8 <= len(lines) <= 20, len(lines)


def slug(heading: str) -> str:
    """A heading's anchor, as Python-Markdown's toc extension (mkdocs) makes it."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_links_between_the_pages_resolve() -> None:
    for page, text in PAGES.items():
        base = (ROOT / page).parent
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, anchor = target.partition("#")
            assert (base / path).exists(), f"{page}: link to {target} (no such file)"
            if anchor and path.endswith(".md"):
                heads = re.findall(r"^#+ (.*)$", (base / path).read_text(encoding="utf-8"), re.MULTILINE)
                slugs = {slug(h) for h in heads}
                assert anchor in slugs, f"{page}: link to {target} (no such heading)"


def test_mkdocs_nav_lists_every_page() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r":\s+(\S+\.md)\s*$", nav, re.MULTILINE))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert listed == pages, (sorted(pages - listed), sorted(listed - pages))


HISTORY = re.compile(r"\b(this session|the session|sessions? \d|this round|used to|now fixed|was fixed|"
                     r"this commit|earlier code|not yet)\b", re.IGNORECASE)


def test_user_text_states_what_is() -> None:
    """History ("this session", "used to", "now fixed", ...) belongs in CHANGELOG.md."""
    found = [f"{page}: {line.strip()}" for page, text in PAGES.items() for line in text.splitlines()
             if HISTORY.search(line)]
    assert not found, "\n".join(found)


def test_the_design_page_draws_the_staging_as_layout_py_does() -> None:
    """docs/design.md's drawing of the staging allocation is the one in mpiring/cuda/layout.py."""
    from mpiring.cuda import layout

    drawing = re.search(r"^ *(\[ control .*?\])$", layout.__doc__ or "", re.MULTILINE | re.DOTALL)
    assert drawing, "mpiring/cuda/layout.py no longer draws the staging"
    lines = [line.strip() for line in drawing.group(1).splitlines()]
    page = [line.strip() for line in PAGES["docs/design.md"].splitlines()]
    assert any(page[i:i + len(lines)] == lines for i in range(len(page))), "\n".join(lines)


def test_the_design_page_states_the_control_boards_size() -> None:
    """docs/design.md's memory per communicator gives the board's bytes per rank as signals lays
    them out (its lines, and the agreement check's descriptors)."""
    from mpiring.node.signals import AGREE_DEPTH, AGREE_LINES, HEADER_BYTES, NUM_COUNTERS

    text = " ".join(PAGES["docs/design.md"].split())
    stated = (f"{HEADER_BYTES:,} bytes of node shared memory per rank ({NUM_COUNTERS} lines of 64 "
              f"bytes: the counters and the agreement check's {AGREE_DEPTH} descriptors of "
              f"{AGREE_LINES * 64} bytes)")
    assert stated in text, stated
