"""Data-parallel training with mpiring averaging the gradients, overlapped with the backward pass.

    mpirun -n 2 python examples/torch_data_parallel.py            # mpiring, then DDP, side by side
    mpirun -n 2 python examples/torch_data_parallel.py --peer none  # mpiring only

Each rank holds a copy of the model. Its gradients live in a few flat *buckets* (each
parameter's ``.grad`` is a view into one), filled in reverse layer order as backward produces
them. When the last gradient of a bucket is accumulated, a hook starts
``comm.Allreduce(MPI.IN_PLACE, bucket, op="avg")`` on a communication stream, so the average of
bucket k runs while backward still computes the gradients of bucket k+1. At the end of
backward the optimizer's stream waits for the communication stream. This is what
``torch.nn.parallel.DistributedDataParallel`` does with NCCL; ``--peer ddp`` times DDP on the
same model and data, and checks that both give the same parameters after training.

mpiring orders a torch tensor's call on ``torch.cuda.current_stream()``, so ``with
torch.cuda.stream(comm_stream)`` is all it takes to put the allreduce there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from mpi4py import MPI

import mpiring

world = MPI.COMM_WORLD


class Buckets:
    """Gradients as views into flat buckets of about ``bucket_mb`` MiB, averaged as they fill."""

    def __init__(self, model: torch.nn.Module, comm: mpiring.Communicator, bucket_mb: float) -> None:
        self.comm = comm
        self.stream = torch.cuda.Stream()
        params = [p for p in model.parameters() if p.requires_grad][::-1]  # backward's order
        limit = int(bucket_mb * 2**20) // 4
        groups: list[list[torch.nn.Parameter]] = [[]]
        for p in params:
            if groups[-1] and sum(q.numel() for q in groups[-1]) + p.numel() > limit:
                groups.append([])
            groups[-1].append(p)
        self.flat: list[torch.Tensor] = []
        self.pending: list[int] = []
        self.bucket_of: dict[torch.nn.Parameter, int] = {}
        for k, group in enumerate(groups):
            flat = torch.zeros(sum(p.numel() for p in group), device=group[0].device)
            start = 0
            for p in group:
                p.grad = flat[start:start + p.numel()].view_as(p)  # backward accumulates here
                start += p.numel()
                self.bucket_of[p] = k
                p.register_post_accumulate_grad_hook(self._ready)
            self.flat.append(flat)
        self.sizes = [len(g) for g in groups]
        self.pending = list(self.sizes)

    def _ready(self, p: torch.nn.Parameter) -> None:
        k = self.bucket_of[p]
        self.pending[k] -= 1
        if self.pending[k] == 0:  # the bucket is complete: average it beside the rest of backward
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.stream):
                self.comm.Allreduce(MPI.IN_PLACE, self.flat[k], op="avg")

    def finish(self) -> None:
        """Make the caller's stream wait for every bucket's average; reset for the next step."""
        assert not any(self.pending), "some gradients were not produced"
        torch.cuda.current_stream().wait_stream(self.stream)
        self.pending = list(self.sizes)

    def zero(self) -> None:
        for flat in self.flat:
            flat.zero_()


def make_model(width: int, depth: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to(device)


def batch(step: int, args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(1000 * step + world.rank)  # each rank its own data
    x = torch.randn(args.batch, args.width, device=device, generator=g)
    return x, torch.randn(args.batch, args.width, device=device, generator=g)


def train(model: torch.nn.Module, step_fn, args: argparse.Namespace, device: torch.device) -> list[float]:
    """Run ``args.steps`` steps; return each timed step's seconds (the slowest rank's)."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    for step in range(args.warmup + args.steps):
        x, y = batch(step, args, device)
        torch.cuda.synchronize()
        world.Barrier()
        start = time.perf_counter()
        step_fn(model, x, y)
        opt.step()
        torch.cuda.synchronize()
        elapsed = world.allreduce(time.perf_counter() - start, op=MPI.MAX)
        if step >= args.warmup:
            times.append(elapsed)
    return times


def run_mpiring(args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, list[float]]:
    model = make_model(args.width, args.depth, device)
    comm = mpiring.Communicator(world, gpu=True)
    buckets = Buckets(model, comm, args.bucket_mb)

    def step(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        buckets.zero()
        torch.nn.functional.mse_loss(m(x), y).backward()
        buckets.finish()

    times = train(model, step, args, device)
    comm.close()
    return model, times


def run_ddp(args: argparse.Namespace, device: torch.device) -> tuple[torch.nn.Module, list[float]]:
    import torch.distributed as dist

    addr = world.bcast(MPI.Get_processor_name() if world.rank == 0 else None)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1" if world.size == 1 else addr)
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=world.rank, world_size=world.size, device_id=device)
    model = make_model(args.width, args.depth, device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index],
                                                    bucket_cap_mb=args.bucket_mb,
                                                    gradient_as_bucket_view=True)

    def step(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        m.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(m(x), y).backward()  # DDP averages (sum / world size)

    times = train(ddp, step, args, device)
    dist.destroy_process_group()
    return model, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--depth", type=int, default=8, help="Linear layers (width x width each)")
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--bucket-mb", type=float, default=64.0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--peer", choices=["ddp", "none"], default="ddp")
    args = parser.parse_args()
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("SLURM_LOCALID", world.rank)))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)

    ours, our_times = run_mpiring(args, device)
    params = sum(p.numel() for p in ours.parameters())
    report = [("mpiring (avg, bucketed, overlapped)", our_times)]
    if args.peer == "ddp":
        theirs, their_times = run_ddp(args, device)
        report.append(("torch DDP (NCCL)", their_times))
        pairs = zip(ours.parameters(), theirs.parameters(), strict=True)
        diff = max(float((a - b).abs().max()) for a, b in pairs)
        diff = world.allreduce(diff, op=MPI.MAX)
    if world.rank == 0:
        print(f"{world.size} ranks, {params / 1e6:.0f} M parameters ({params * 4 / 2**20:.0f} MiB of "
              f"fp32 gradients), batch {args.batch}, buckets of {args.bucket_mb} MiB, "
              f"median of {args.steps} steps")
        base = statistics.median(report[-1][1])
        for name, times in report:
            med = statistics.median(times)
            print(f"  {name:38s} {med * 1e3:8.2f} ms/step   {base / med:5.2f}x of {report[-1][0]}")
        if args.peer == "ddp":
            print(f"  largest parameter difference after training, mpiring vs DDP: {diff:.3g}")


if __name__ == "__main__":
    main()
