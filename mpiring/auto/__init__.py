"""Layer 7, ``auto``: how ``algorithm="auto"`` picks a row — the tuning-table file format and
lookup (``table``), which table a machine uses (``tuning``, ``machine``), and the scale-out cost
model. Imports the layers below it, the algorithm table included."""
