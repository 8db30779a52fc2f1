"""Layer 5, ``context``: what a communicator holds per kind of memory, behind one face
(``base.Backend``). Imports ``core``, ``node``, ``cuda``, ``ring``.

``host.HostBackend`` reduces host arrays (the ring over node shared memory, ``MPI.Allreduce``);
``gpu.GpuBackend`` reduces GPU arrays (IPC staging, the rings, the one-launch kernels, NCCL,
the watchdog). Algorithms (``mpiring.algorithms``) call the backend they are given.
"""
