"""Transports: how chunks move between ranks. ``base`` is the seam, ``host`` runs it in node
shared memory, ``cuda_ipc`` on GPUs through CUDA IPC."""
