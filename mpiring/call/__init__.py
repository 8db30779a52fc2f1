"""Layer 8, ``call``: from one collective call to its run — the communicator's options, the
dispatch (buffers described, row chosen, plan made), the eager replay of known call shapes, and
the per-call agreement check. Imports every layer below it."""
