"""mpiring's optional C extensions (``mpiring.call._hotpath``, ``mpiring.cuda._streamprog``):
built by ``pip install`` where a C compiler exists, or by ``python -m tools.build_hotpath`` in a
checkout. One rule for all of them: ``MPIRING_HOTPATH=0`` turns every compiled path off, and
where one is not built its Python reference runs."""

from __future__ import annotations

import importlib
from types import ModuleType

from . import settings


def optional(name: str, environ: dict[str, str] | None = None) -> ModuleType | None:
    """The extension module ``name``, or None where it is not built or ``MPIRING_HOTPATH=0``
    (read from ``environ``, else the process environment). Its caller checks that the module
    agrees with the Python side it serves (its constants), and raises where it does not."""
    if settings.flag("MPIRING_HOTPATH", environ) is False:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
