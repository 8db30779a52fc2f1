"""Build mpiring's C extensions into the package directory of this checkout, with gcc and this
interpreter's headers: for a checkout used from ``PYTHONPATH`` (a GPU node with no pip; ``pip
install`` builds them by itself, see setup.py). They are the compiled eager replay
(``mpiring/call/_hotpath.c``) and the compiled stream programs (``mpiring/cuda/_streamprog.c``,
ce-twoshot's host path).

    python -m tools.build_hotpath            # both, beside their sources, for this Python
    python -m tools.build_hotpath --check    # build, then import them and say whether calls use them
    python -m tools.build_hotpath --extension streamprog --output x.so   # one, elsewhere
    CC=clang python -m tools.build_hotpath   # another compiler

Each interpreter loads only its own file (the suffix names the Python version and platform), so
build once per Python that runs the checkout. ``MPIRING_HOTPATH=0`` leaves it unused.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "mpiring" / "call" / "_hotpath.c"
SOURCES = {"hotpath": SOURCE, "streamprog": ROOT / "mpiring" / "cuda" / "_streamprog.c"}
FLAGS = ["-O2", "-std=c11", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"]


def target(source: Path = SOURCE) -> Path:
    """Where this interpreter imports the extension of ``source`` from: beside it."""
    return source.with_name(source.stem + sysconfig.get_config_var("EXT_SUFFIX"))


def command(compiler: str | None = None, output: Path | None = None, source: Path = SOURCE) -> list[str]:
    """The compiler command line that builds ``source``'s extension into ``output`` (default
    :func:`target`)."""
    cc = shlex.split(compiler or os.environ.get("CC") or "gcc")
    include = sysconfig.get_paths()["include"]
    return [*cc, *FLAGS, f"-I{include}", str(source), "-o", str(output or target(source))]


def build(compiler: str | None = None, output: Path | None = None, source: Path = SOURCE) -> Path:
    """Compile ``source``'s extension into ``output`` (default :func:`target`); raises
    :class:`RuntimeError` with the compiler's output if it fails."""
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise RuntimeError(f"no Python.h in {include}: install this Python's headers (python3-dev), "
                           "or run without the compiled replay (it is optional)")
    cmd = command(compiler, output, source)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError as err:
        raise RuntimeError(f"no C compiler {cmd[0]!r} ({err.strerror}): set CC, or run without the "
                           "compiled replay (it is optional)") from None
    if done.returncode != 0:
        raise RuntimeError(f"building {source.name} failed:\n$ {shlex.join(cmd)}\n"
                           f"{done.stdout}{done.stderr}")
    return output or target(source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_hotpath",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--check", action="store_true", help="import the built module afterwards")
    parser.add_argument("--extension", choices=sorted(SOURCES),
                        help="build this one only (default: both; hotpath where --output is given)")
    parser.add_argument("--output", type=Path, help="build this file instead (default: beside the source)")
    args = parser.parse_args(argv)
    names = [args.extension] if args.extension else ["hotpath"] if args.output else list(SOURCES)
    for name in names:
        try:
            built = build(output=args.output, source=SOURCES[name])
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        print(f"built {built}")
    if args.check:
        sys.path.insert(0, str(ROOT))
        from mpiring.call import hot_replay
        from mpiring.cuda import streamprog

        found = {"hotpath": hot_replay.compiled() is not None,
                 "streamprog": streamprog.compiled() is not None}
        for name in names:
            print(f"{name}:", "importable" if found[name] else "not used (MPIRING_HOTPATH=0?)")
        return 0 if all(found[name] for name in names) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
