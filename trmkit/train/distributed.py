"""Several processes training one run, on torch.distributed (docs/distributed.md).

torchrun starts the processes and sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE;
the CLI reads them into a `World` (the only place that reads the environment). Then:

- the process group is gloo on CPUs and NCCL on GPUs, with a timeout: a rank that stops
  answering fails the others' next collective instead of hanging them (torchrun itself
  stops every rank when one exits);
- rank 0 plans (its probes run while the others wait) with the cores and the memory budget of
  its machine split by the ranks on it, and sends the plan to every rank;
- each rank holds `train.batch_size / world` ACT slots, refilled from its own share of the
  store's epoch (data/stream.py), and the model is wrapped in DistributedDataParallel: the
  gradients are averaged during the last micro-batch's backward, bucket by bucket;
- the puzzle embedding's sign-SGD rows are gathered from every rank before the update, so the
  tables stay identical without being all-reduced whole;
- the loop's decisions that depend on a clock or a signal (stop, out of time, checkpoint due)
  are agreed by an all-reduce once per step;
- checkpoints: rank 0 writes the model, optimizer and EMA once, plus every rank's carry, slot
  samples, RNG and data position, gathered to it, in the one atomic checkpoint;
- a rank leaves with os._exit once its work is written (cli._leave_after): tearing down DDP and
  the gloo process group at interpreter exit can deadlock (docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import datetime
import platform
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.distributed as dist

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError
from trmkit.plan.device import bind_local_device, collective_backend


@dataclass(frozen=True)
class World:
    """Where this process stands among the processes of one run."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1  # processes on this machine
    launched: bool = False  # started by torchrun (even as its only process: NCCL/gloo, DDP and all)

    @property
    def active(self) -> bool:
        return self.launched or self.size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


SINGLE = World()


def world_from_env(env: Mapping[str, str]) -> World:
    """The World torchrun describes in `env` (a single process when it set nothing)."""
    if "WORLD_SIZE" not in env:
        return SINGLE
    try:
        size, rank = int(env["WORLD_SIZE"]), int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_size = int(env.get("LOCAL_WORLD_SIZE", size))
    except ValueError as err:
        raise ConfigError(f"torchrun's environment is not readable ({err}): launch with "
                          "`torchrun --nproc-per-node N -m trmkit train CONFIG`") from err
    if not (0 <= rank < size and 0 <= local_rank < local_size <= size):
        raise ConfigError(f"torchrun's environment is inconsistent: RANK={rank} WORLD_SIZE={size} "
                          f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_size}")
    return World(rank, size, local_rank, local_size, launched=True)


def torchrun_command(python: str, argv: list[str], nproc: int) -> list[str]:
    """`python -m torch.distributed.run --standalone --nproc-per-node=N -m trmkit ARGV`, --nproc dropped from ARGV
    (`trmkit train|rl train --nproc N ...`: the same command under torchrun, N processes on this machine)."""
    if nproc < 1:
        raise ConfigError(f"--nproc {nproc}: give the number of processes, 1 or more")
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "trmkit", *rest]


def start(world: World, device: str, timeout_s: float) -> str:
    """Join the process group; returns the backend (plan.collective_backend)."""
    backend = collective_backend(device)
    bind_local_device(device, world.local_rank)
    dist.init_process_group(backend, rank=world.rank, world_size=world.size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    return backend


def local_config(cfg: Config, world: World) -> Config:
    """cfg with train.batch_size = this rank's slots (the global batch divided by the world)."""
    batch = cfg.train.batch_size
    if batch % world.size:
        near = max(world.size, round(batch / world.size) * world.size)
        raise ConfigError(f"train.batch_size={batch} is the global batch, shared equally by the {world.size} "
                          f"processes: it must be a multiple of {world.size} (e.g. train.batch_size={near})")
    return config_mod.replace(cfg, "train", batch_size=batch // world.size)


def share_object(obj: Any, world: World, src: int = 0) -> Any:
    """`obj` of rank `src` on every rank."""
    box = [obj if world.rank == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """The DistributedDataParallel wrapper the training forward goes through. Buffers are not
    broadcast at every forward (the puzzle embedding is kept in step by `gather_rows`);
    gradient_as_bucket_view lets the gradients share DDP's bucket memory where DDP allocates them."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel as DDP

    newer = "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters  # torch >= 2.13 renamed it
    no_sync = {"forward_sync_buffers": False} if newer else {"broadcast_buffers": False}
    # device_ids=None: the model is on one device already (the local rank's GPU, bound by start())
    return DDP(model, device_ids=None, gradient_as_bucket_view=True, **no_sync)


def reduce_after(net) -> Any:
    """For StepContext.reduce_after: DDP's no_sync() for every micro-batch but the step's last."""
    def context(last: bool):
        return contextlib.nullcontext() if last else net.no_sync()
    return context


def gather_rows(ids: torch.Tensor, grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The puzzle-embedding rows (ids (n,), grads (n, W)) of every rank, concatenated in rank order."""
    size = dist.get_world_size()
    counts = [torch.zeros(1, dtype=torch.int64, device=ids.device) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([len(ids)], dtype=torch.int64, device=ids.device))
    most = int(max(c.item() for c in counts))
    width = grads.shape[1]
    pad_ids = torch.zeros(most, dtype=torch.int64, device=ids.device)
    pad_grads = torch.zeros(most, width, dtype=torch.float32, device=grads.device)
    pad_ids[:len(ids)], pad_grads[:len(ids)] = ids, grads.float()
    all_ids = [torch.empty_like(pad_ids) for _ in range(size)]
    all_grads = [torch.empty_like(pad_grads) for _ in range(size)]
    dist.all_gather(all_ids, pad_ids)
    dist.all_gather(all_grads, pad_grads)
    n = [int(c.item()) for c in counts]
    return (torch.cat([a[:k] for a, k in zip(all_ids, n)]),
            torch.cat([g[:k] for g, k in zip(all_grads, n)]))


def agree(flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag true on any rank -> true on every rank (one small all-reduce)."""
    t = torch.tensor([float(f) for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


SUMMED = ("train/halted", "train/new_samples")  # counts of the step: every process's added


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric over every rank: counts summed, the rest averaged over the ranks that have it (the
    step's loss over all slots; the accuracy of halted samples, weighted by how many halted)."""
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, metrics)
    out = {}
    for key in metrics:
        have = [m for m in everyone if isinstance(m.get(key), (int, float))]
        values = [m[key] for m in have]
        if key in SUMMED:
            out[key] = sum(values)
        elif (key.startswith(("train/accuracy", "train/exact_accuracy", "train/steps"))
              and key != "train/accuracy_all_slots"):
            weights = [m.get("train/halted", 1.0) for m in have]
            out[key] = sum(v * w for v, w in zip(values, weights)) / max(sum(weights), 1e-9)
        else:
            out[key] = sum(values) / len(values) if values else metrics[key]
    return out


def sum_totals(totals: dict[str, float]) -> dict[str, float]:
    """An evaluation's sums (float64, exact for counts) added over the ranks."""
    keys = sorted(totals)
    t = torch.tensor([float(totals[k]) for k in keys], dtype=torch.float64)  # CPU: gloo carries it
    dist.all_reduce(t)
    return {k: (int(v) if isinstance(totals[k], int) else v) for k, v in zip(keys, t.tolist())}


def gather_object(obj: Any, world: World) -> list:
    """`obj` of every rank, in rank order, on every rank."""
    out: list = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    dist.barrier()


RANK_KEYS = ("carry.", "slot.", "rng.")  # per-rank tensors of a checkpoint (train/state.py)


def is_rank_key(key: str) -> bool:
    return key.startswith(RANK_KEYS)


def gather_rank_state(tensors: dict[str, torch.Tensor], meta: dict, world: World
                      ) -> tuple[dict[str, torch.Tensor], list[dict] | None]:
    """Rank 0 receives every rank's own tensors (renamed `rank{r}/...`) and meta; others get ({}, None).
    Every rank calls it. Tensors travel one at a time, so rank 0 holds one other rank's at a time
    beyond what it writes."""
    own = {k: v for k, v in tensors.items() if is_rank_key(k)}
    metas: list = [None] * world.size
    dist.all_gather_object(metas, meta)  # small: stream position, RNG states
    out: dict[str, torch.Tensor] = {}
    for key in sorted(own):
        t = own[key].detach().contiguous()
        raw = t.reshape(-1).view(torch.uint8) if t.numel() else t.reshape(-1).to(torch.uint8)  # any dtype
        parts = [torch.empty_like(raw) for _ in range(world.size)] if world.main else None
        dist.gather(raw, parts, dst=0)
        if world.main:
            for r in range(1, world.size):
                out[f"rank{r}/{key}"] = parts[r].view(t.dtype).reshape(t.shape).cpu()
    return out, metas if world.main else None


def own_tensors(tensors: Mapping[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """A checkpoint's tensors as rank `rank` saved them (rank 0's under their plain names)."""
    if rank == 0:
        return {k: v for k, v in tensors.items() if not k.startswith("rank")}
    prefix = f"rank{rank}/"
    mine = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    shared = {k: v for k, v in tensors.items() if not k.startswith("rank") and not is_rank_key(k)}
    return {**shared, **mine}


def is_peer_failure(err: BaseException) -> bool:
    """A collective that failed because another process died, hung or closed its connection."""
    text = str(err)
    backend_error = getattr(dist, "DistBackendError", None)
    return (backend_error is not None and isinstance(err, backend_error)) or (isinstance(err, RuntimeError) and any(
        m in text for m in ("Connection reset by peer", "Connection closed by peer", "connection closed",
                            "Broken pipe", "timed out", "Timed out")))


def environment_summary(world: World, backend: str) -> str:
    host = platform.node() or "?"
    return (f"distributed: {world.size} processes ({world.local_size} on this machine, {host}), "
            f"backend {backend}, this is rank {world.rank}")
