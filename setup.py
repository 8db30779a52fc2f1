"""Only the optional C extensions: the rest of the build is pyproject.toml's.

``mpiring.call._hotpath`` (the compiled eager replay, ``mpiring/call/_hotpath.c``) and
``mpiring.cuda._streamprog`` (the compiled stream programs, ``mpiring/cuda/_streamprog.c``) are
built where a C compiler and Python's headers exist; where they do not, the install goes on
without them (``optional=True``) and mpiring does the same in Python
(:mod:`mpiring.call.hot_replay`, :mod:`mpiring.cuda.streamprog`). A checkout used from
``PYTHONPATH`` builds them with ``python -m tools.build_hotpath`` instead.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("mpiring.call._hotpath", ["mpiring/call/_hotpath.c"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True),
                   Extension("mpiring.cuda._streamprog", ["mpiring/cuda/_streamprog.c"],
                             extra_compile_args=["-O2", "-std=c11"], optional=True)])
