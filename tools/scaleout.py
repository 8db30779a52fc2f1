"""The scale-out cost model (``mpiring.auto.costmodel``) against the bench's measurements, and its
predictions for clusters this machine is not (``docs/scale-out.md`` shows both)::

    python -m tools.scaleout --node results/h200x2.csv --virtual results/h200x2-hier.csv \\
        --plot docs/scale-out.png            # from the repository root

``--node``: a one-node run; mpiring's ring in the node and NCCL's are fitted to its ``ring``
and ``nccl`` rows (alpha from the smallest size, beta from the two largest) and every size is
predicted. ``--virtual``: a run on 2 virtual nodes of one GPU each; the
"network" between them is NCCL over NVLink, fitted to its ``nccl`` rows, and ``hier`` is
predicted from it. Each table gives prediction, measurement and error. ``--plot`` draws the
predicted speed-up of ``hier`` over flat NCCL for 2 to 64 nodes of 2, 4 and 8 GPUs, with the
fitted NVLink link and the stated network (``costmodel.NIC_400G``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from mpiring.auto import costmodel as cm
from mpiring.bench.results import Row, read_csv

CHECK_SIZES = (1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30, 8 << 30)


def times(rows: list[Row], algo: str, batches: str | None = None) -> dict[int, float]:
    """Seconds per call of ``algo`` by message size (timed, checked rows only)."""
    out = {}
    for r in rows:
        if r.algo == algo and r.time_us is not None and r.check == "OK" and (
                batches is None or r.batches == batches or r.batches.endswith(f":{batches}")):
            out[r.size_bytes] = r.time_us * 1e-6
    return out


def fit(measured: dict[int, float], ranks: int) -> cm.Link:
    return cm.fit_ring(measured.items(), ranks)


Check = list[tuple[int, float, float, float]]


def compare(measured: dict[int, float], predict: Callable[[int], float],
            sizes: tuple[int, ...] = CHECK_SIZES) -> Check:
    """(size, predicted s, measured s, error) at those of ``sizes`` that were measured."""
    return [(s, predict(s), measured[s], predict(s) / measured[s] - 1) for s in sizes if s in measured]


def table(title: str, rows: Check) -> str:
    lines = [f"{title}", "| size | predicted | measured | error |", "| --- | --- | --- | --- |"]
    for size, pred, meas, err in rows:
        lines.append(f"| {_size(size)} | {pred * 1e6:.0f} us | {meas * 1e6:.0f} us | {err:+.0%} |")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def plot(nvlink: cm.Link, nccl_nvlink: cm.Link, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [1 << e for e in range(10, 34)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), sharey=True)
    for ax, gpus in zip(axes, (2, 4, 8), strict=True):
        for nodes in (2, 4, 8, 16, 64):
            c = cm.Cluster(nodes, gpus, nvlink, cm.NIC_400G, nccl_nvlink=nccl_nvlink)
            speedup = [cm.flat(s, c) / cm.hier(s, c, cm.best_pieces(s, c)) for s in sizes]
            ax.plot(sizes, speedup, label=f"{nodes} nodes")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{gpus} GPUs per node")
        ax.set_xlabel("message size (bytes)")
    axes[0].set_ylabel("predicted flat NCCL time / hier time")
    axes[0].legend()
    fig.suptitle(f"hier vs flat NCCL, model: mpiring ring in a node alpha {nvlink.alpha * 1e6:.1f} us, "
                 f"beta {nvlink.beta / 1e9:.0f} GB/s; NCCL in a node alpha {nccl_nvlink.alpha * 1e6:.1f} us "
                 f"(both fitted); network alpha "
                 f"{cm.NIC_400G.alpha * 1e6:.0f} us, beta {cm.NIC_400G.beta / 1e9:.0f} GB/s per GPU (stated)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.scaleout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", type=Path, required=True, help="bench CSV of a one-node run")
    parser.add_argument("--virtual", type=Path, help="bench CSV of a run on 2 virtual nodes")
    parser.add_argument("--plot", type=Path, help="where to draw the predictions (PNG)")
    args = parser.parse_args(argv)
    rows = read_csv(args.node)
    ranks = rows[0].nranks
    ring = times(rows, "ring")
    nvlink = fit(ring, ranks)
    print(f"NVLink ring fitted on {ranks} ranks: alpha {nvlink.alpha * 1e6:.2f} us, "
          f"beta {nvlink.beta / 1e9:.1f} GB/s\n")
    print(table(f"ring allreduce, {ranks} ranks, one node",
                compare(ring, lambda s: cm.ring_allreduce(s, ranks, nvlink))))
    nccl = times(rows, "nccl")
    nccl_nvlink = fit(nccl, ranks)
    print(f"\nNCCL in the node fitted: alpha {nccl_nvlink.alpha * 1e6:.2f} us, "
          f"beta {nccl_nvlink.beta / 1e9:.1f} GB/s\n")
    print(table(f"ncclAllReduce, {ranks} ranks, one node",
                compare(nccl, lambda s: cm.network_allreduce(s, ranks, nccl_nvlink))))
    if args.virtual:
        vrows = read_csv(args.virtual)
        link = fit(times(vrows, "nccl"), 2)
        cluster = cm.Cluster(2, 1, nvlink, link)
        print(f"\n'network' between the virtual nodes (NCCL over NVLink) fitted: alpha "
              f"{link.alpha * 1e6:.2f} us, beta {link.beta / 1e9:.1f} GB/s\n")
        hier = times(vrows, "hier", "1")
        print(table("hier, 2 virtual nodes of 1 GPU", compare(hier, lambda s: cm.hier(s, cluster),
                                                               tuple(sorted(hier)))))
    if args.plot:
        plot(nvlink, nccl_nvlink, args.plot)
        print(f"\nwrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
