"""Only the optional C extension: the rest of the build is pyproject.toml's.

``mpiring.call._hotpath`` (the compiled eager replay, ``mpiring/call/_hotpath.c``) is built where
a C compiler and Python's headers exist; where they do not, the install goes on without it
(``optional=True``) and mpiring replays in Python (:mod:`mpiring.call.hot_replay`). A checkout used
from ``PYTHONPATH`` builds it with ``python -m tools.build_hotpath`` instead.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("mpiring.call._hotpath", ["mpiring/call/_hotpath.c"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True)])
