"""Where the plan runs: the device, the thread pools, and the device's side of several processes
(the collective backend, one GPU per local rank)."""

from __future__ import annotations

import torch

from trmkit.config import ConfigError
from trmkit.hardware import HardwareInfo
from trmkit.plan.objects import Choice


def choose_device(requested: str, hw: HardwareInfo) -> Choice:
    if requested == "cuda" and not hw.torch.cuda_available:
        raise ConfigError("run.device=cuda but no CUDA device is visible: set run.device=auto or cpu")
    if requested in ("cpu", "cuda"):
        return Choice(requested, "set in the config (run.device)")
    if hw.torch.cuda_available:
        return Choice("cuda", f"CUDA device found: {hw.torch.cuda_device}")
    return Choice("cpu", "no CUDA device found")


BUSY_CORE = 0.6  # another process using this share of a core keeps it busy for the plan


def choose_threads(requested: int, hw: HardwareInfo, ranks_here: int = 1,
                   others_busy: float = 0.0) -> tuple[Choice, Choice]:
    """Intra-op threads (one per usable core that other processes leave free, the cores shared by
    the ranks on this machine) and inter-op threads (1).

    others_busy: cores' worth of CPU other processes used while the plan was made. A thread whose
    core is busy stalls the whole step at every OpenMP barrier: beside two busy loops on 2 cores a
    2-thread network call took 65-646 ms, a 1-thread one 62 ms (24 and 42 ms on idle cores)."""
    cores = hw.cpu.effective_cores
    busy = int(others_busy / BUSY_CORE) if others_busy >= BUSY_CORE else 0
    if requested <= 0 and ranks_here == 1 and busy and cores > 1:
        free = max(1, cores - busy)
        intra = Choice(free, f"{free} of the {cores} usable cores: other processes kept ~{others_busy:.1f} cores "
                             "busy while the plan was made, and a thread on a busy core stalls every step "
                             "(set run.threads to override)")
        return intra, Choice(1, "a step is one chain of dependent ops: a second pool would only compete for the cores")
    if requested <= 0 and ranks_here > 1:
        extra = "; fewer cores than processes, so they will wait on each other" if cores < ranks_here else ""
        intra = Choice(max(1, cores // ranks_here), f"the {cores} usable cores ({hw.cpu.effective_source}) "
                                                    f"shared by the {ranks_here} processes on this machine{extra}")
    elif requested > 0:
        extra = f"; more than the {cores} usable cores, so threads will wait on each other" \
            if requested > cores else ""
        intra = Choice(requested, "set in the config (run.threads)" + extra)
    else:
        intra = Choice(cores, f"one per usable core ({cores}, from {hw.cpu.effective_source})")
    inter = Choice(1, "a step is one chain of dependent ops: a second pool would only compete for the cores")
    return intra, inter


def collective_backend(device: str) -> str:
    """torch.distributed's backend for a device: gloo on CPUs; on GPUs NCCL for GPU tensors
    (gradients, embedding rows) and gloo for the few CPU ones (random states, data positions)."""
    return "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"


def bind_local_device(device: str, local_rank: int) -> None:
    """With several processes on a GPU machine, each uses the GPU of its local rank."""
    if device == "cuda":
        torch.cuda.set_device(local_rank)
