"""The floor of a replayed call: its bound launch (:class:`mpiring.cuda.launcher.BoundLaunch`)
made with one C call, nothing of mpiring around it (``tools/csrc/launch_floor.c``, built at run
time into a temporary folder with :func:`tools.build_hotpath.build`). :mod:`tools.enqueue`'s
"kernel alone" rows time it beside the call itself.

    module, why = launch_floor.load()                    # module None: why says what is missing
    floor = launch_floor.floor(module, bound, stream)    # floor.run(): one cuLaunchKernel
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import shutil
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from mpiring.call import hot_replay
from mpiring.cuda.launcher import BoundLaunch

from . import build_hotpath

SOURCE = Path(__file__).with_name("csrc") / "launch_floor.c"
NAME = "_launch_floor"  # the extension's module name (PyInit__launch_floor)


@functools.cache
def load(compiler: str | None = None) -> tuple[ModuleType | None, str]:
    """The extension (built once per process and ``compiler``) and "", or None and why not (no C
    compiler, no Python headers, a failed build: the first line of what it said)."""
    folder = Path(tempfile.mkdtemp(prefix="launch_floor-"))
    try:
        output = folder / (NAME + sysconfig.get_config_var("EXT_SUFFIX"))
        built = build_hotpath.build(compiler, output, SOURCE)
        spec = importlib.util.spec_from_file_location(NAME, built)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (RuntimeError, ImportError) as err:
        return None, str(err).splitlines()[0]
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # loaded: the mapping outlives the file
    return module, ""


def driver_launch_address() -> int:
    """The address of the driver's ``cuLaunchKernel`` (the compiled replay's, where it is built:
    the same symbol); OSError where there is no ``libcuda.so.1``."""
    module = hot_replay.compiled()
    if module is not None:
        return int(module.cuda_launch_address())
    address = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
    if not address:
        raise OSError("libcuda.so.1 has no cuLaunchKernel")
    return address


def floor(module: ModuleType, bound: BoundLaunch, stream: int, launch: int | None = None) -> Any:
    """A ``Launch`` of ``bound``'s kernel, grid, block and parameters on ``stream`` (a handle),
    through ``launch`` (default: :func:`driver_launch_address`); it keeps ``bound`` (the owner
    of its parameters) alive."""
    address = driver_launch_address() if launch is None else launch
    return module.Launch(launch=address, function=bound.function, grid=bound.blocks, block=bound.threads,
                         stream=stream, params=bound.params, keep=bound)
