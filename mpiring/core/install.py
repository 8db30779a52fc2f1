"""The one place that writes ``pip install`` commands for mpiring's extras, for every hint
mpiring prints (no GPU, no CuPy, no NCCL, no cuda-bindings, the bench's optional packages).

mpiring is not on the package index: ``pip install 'mpiring[cuda13]'`` finds nothing. A hint
therefore names where this mpiring came from: the checkout it is imported from (an editable
install: ``pip install -e '/path/to/mpiring[cuda13]'``, or ``.`` when that is the current
folder), else the folder, archive or repository pip recorded installing it from
(``direct_url.json``, PEP 610). Only a copy that pip installed from an index gets the plain
``pip install 'mpiring[cuda13]'``: it came from there.

:data:`EXTRAS` lists the extras of ``pyproject.toml`` (a test keeps them equal), and
:func:`pip_install` refuses any other, so that no hint names an extra that does not exist.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import shlex
from pathlib import Path
from urllib.parse import unquote, urlparse

EXTRAS = frozenset({"cuda12", "cuda13", "mpi", "bench", "peers", "test", "nvrtc", "docs"})
CUDA_EXTRAS = {12: "cuda12", 13: "cuda13"}  # the extra of each CUDA major
CHECKOUT = Path(__file__).resolve().parents[2]  # the folder above the package (mpiring/core/..)


@functools.cache
def source() -> tuple[str, bool]:
    """Where pip can install this mpiring from, and whether as editable: a folder, a URL
    (``"git+https://...@commit"``, ``"file:///.../mpiring.whl"``), or ``"mpiring"`` (an index).

    A package imported from a checkout (an editable install, or the checkout on ``sys.path``)
    is named by that checkout; one installed into site-packages by what pip recorded."""
    if (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "mpiring" / "__init__.py").is_file():
        return str(CHECKOUT), True
    try:
        recorded = importlib.metadata.distribution("mpiring").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        recorded = None
    if recorded:
        try:
            where = json.loads(recorded)
            url = str(where["url"])
        except (ValueError, KeyError, TypeError):
            url, where = "", {}
        if "dir_info" in where and url.startswith("file:"):
            return unquote(urlparse(url).path), bool(where["dir_info"].get("editable"))
        if "vcs_info" in where:
            commit = where["vcs_info"].get("commit_id")
            return f"{where['vcs_info'].get('vcs', 'git')}+{url}" + (f"@{commit}" if commit else ""), False
        if url:
            return url, False
    return "mpiring", False


def pip_install(*extras: str) -> str:
    """The command that installs mpiring with ``extras`` from where this copy came from, e.g.
    ``pip install -e '/home/me/mpiring[cuda13]'``. Raises ValueError for an extra that
    ``pyproject.toml`` does not define (a hint must never name one)."""
    unknown = sorted(set(extras) - EXTRAS)
    if unknown:
        raise ValueError(f"no such extra of mpiring: {', '.join(unknown)} "
                         f"(extras: {', '.join(sorted(EXTRAS))})")
    where, editable = source()
    wanted = f"[{','.join(extras)}]" if extras else ""
    if where == "mpiring":
        return f"pip install {shlex.quote('mpiring' + wanted)}"
    if "://" in where:  # a PEP 508 direct reference: extras before the URL
        return f"pip install {shlex.quote(f'mpiring{wanted} @ {where}')}"
    if Path(where).resolve() == Path.cwd().resolve():
        where = "."
    return f"pip install {'-e ' if editable else ''}{shlex.quote(where + wanted)}"


def cuda_choices() -> str:
    """Both CUDA extras' commands, each with its CUDA major."""
    return " or ".join(f"{pip_install(extra)} (CUDA {major})" for major, extra in sorted(CUDA_EXTRAS.items()))
