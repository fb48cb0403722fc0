"""One private run over several processes (torch.distributed): data parallelism on dpviz's own DP step.

``torchrun --nproc-per-node N -m dpviz run …`` starts N copies of the command; each is a rank of one run:

* **Sampling.** Every rank draws the same Poisson mask over the whole private set (the run's sampling
  generator, seeded alike on every rank) and keeps the examples of its shard, i ≡ rank (mod N). So rank r
  Poisson-samples its shard with the run's q, and the union over ranks is exactly the Poisson(q) batch a
  one-process run draws at that step: each example is included independently with probability q,
  whichever shard holds it. The accountant is unchanged (same q, σ and steps), and a run's ε does not
  depend on its world size.
* **Clipping, reduction, noise.** Each rank clips its examples' gradients and sums them; the sums are
  all-reduced (one SUM per step); then every rank adds the same Gaussian noise (the run's noise generator,
  seeded alike on every rank, draws identical values), so the noise enters the global sum exactly once
  and every rank applies the same update. The sum is divided by the expected batch q·n, as in one process.
* **Agreement.** Rank 0's weights are broadcast at the start; every `CHECK_EVERY` steps the ranks compare
  a checksum of their weights and stop with an error naming the step if they differ.
* **The store.** Only rank 0 writes (the run's row, metrics, checkpoints, summary); its summary records
  the world size and the backend. A rank that dies takes the run down (torchrun stops the others): the
  store marks it ``interrupted`` the next time it is opened, as for any run whose process ended.

A non-private step is sharded the same way (each rank's summed loss over the global batch, gradients
all-reduced). LP on cached features (a closed-form step on a (B, d) matrix) is not sharded: every rank
computes the same step, which is as fast as one rank doing it and needs no communication.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

CHECK_EVERY = 50  # steps between the ranks' weight-agreement checks


@dataclass(frozen=True)
class World:
    """This process's place in a distributed run: its rank, the world size and the backend."""

    rank: int
    size: int
    backend: str

    def shard(self, idx: torch.Tensor) -> torch.Tensor:
        """The entries of the global batch ``idx`` (example indices) that this rank's shard holds."""
        return idx[idx % self.size == self.rank]

    def all_reduce(self, tensors: list[torch.Tensor]) -> None:
        """Sum ``tensors`` over the ranks in place, in one flat message."""
        if not tensors:
            return
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        for t, part in zip(tensors, flat.split([t.numel() for t in tensors])):
            t.copy_(part.view_as(t))

    def broadcast(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers on every rank."""
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, 0)

    def check(self, module: torch.nn.Module, step: int) -> None:
        """Raise on every rank if the ranks' weights no longer agree (a checksum: sum and sum of squares)."""
        with torch.no_grad():
            ps = [p.detach().double() for p in module.parameters()]
            mine = torch.stack([sum(p.sum() for p in ps), sum(p.pow(2).sum() for p in ps)])
        hi, lo = mine.clone(), -mine
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MAX)
        if not torch.equal(hi, -lo):
            raise RuntimeError(f"distributed run: the ranks' weights differ at step {step} (checksums from "
                               f"{(-lo).tolist()} to {hi.tolist()}); every rank must apply the same update")

    def share(self, obj):
        """Rank 0's ``obj`` (any picklable value) on every rank."""
        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, 0)
        return box[0]

    def barrier(self) -> None:
        dist.barrier()


def current() -> World | None:
    """The run's `World` when this process is one of several ranks of an initialised process group."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return World(rank=dist.get_rank(), size=dist.get_world_size(), backend=str(dist.get_backend()))


def launched() -> bool:
    """Whether torchrun (or another launcher setting WORLD_SIZE) started this process as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(device: str = "auto") -> World | None:
    """Join the process group torchrun describes (WORLD_SIZE, RANK, MASTER_ADDR/PORT in the environment):
    NCCL on CUDA, gloo on a CPU; each rank on its own GPU (LOCAL_RANK). None when started alone."""
    if not launched():
        return None
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return current()


def close() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
