"""Layer 4, ``ring``: the double-buffered ring as data (``schedule``), its one pipeline over every
transport (``pipeline``), stall diagnosis, and the transports (host shared memory, CUDA IPC with
stream memory operations, CUDA IPC with events, the tracing wrapper). Imports ``core``, ``node``,
``cuda``."""
