"""Layer 1, ``core``: what every other layer speaks — errors, the dtype/op table, the
``MPIRING_*`` settings, buffers, a call's fields and GPU descriptor, the reproducible reference.
Pure: no MPI communication, no device. Imports nothing else of mpiring."""
