"""The LM policy sharded over the processes of one run: torch.distributed.fsdp's FSDP2 (`fully_shard`).

Each decoder layer is one FSDP unit and the rest (embeddings, final norm, head) the root's: at rest every process
holds 1/W of every weight, gradient and optimizer state (the frozen base too, under LoRA). FSDP2 over a peft
model runs on CPU with gloo (torch 2.13, measured); FSDP1 (`FullyShardedDataParallel`) refuses a CPU-only
machine ("FSDP needs a non-CPU accelerator device"), so it is not used.

How a step runs on W processes (`Sharding`):
- rollouts: FSDP gathers a unit's weights at every forward, a collective every process must join, but the
  processes generate different numbers of tokens (rows stop at their own eos). So a round gathers the whole
  policy once (`gathered()`: reshard-after-forward off, every unit unsharded) and frees it at the round's end;
  inside, generation runs without collectives. Each process generates its share of the rows of every
  `generate` call (a contiguous block, `share`) with its own sampling seed, and the texts are gathered, so the
  game (scoring in the sandbox, task buffers, advantages) sees the whole round and stays identical everywhere;
- update: gathered the same way; each process back-propagates its own rows in its own micro-batches without
  gradient sync, and only its last micro-batch's backward reduce-scatters (sums, divide factor 1: every loss
  term is already divided by the whole step's rows or tokens, all-reduced); a process with no rows runs one
  zero-weighted backward so that every process joins the reduction;
- checkpoints: the full trained tensors (`full`), gathered by every process while rank 0 writes; a full
  tensor loaded is cut to this process's shard (`shard_of`), so a checkpoint loads at any world size.
So the memory saved is the resting state (weights, gradients, optimizer moments between phases); during a round
and an update each process holds the whole policy, as one process would.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

Log = Callable[[str], None]
MAXED = ("log_ratio_abs_max",)  # update stats combined by max over the processes (the rest are sums)


def is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor (a collective for a sharded one: every process must call it in the same order)."""
    return t.full_tensor() if is_dtensor(t) else t


def shard_of(whole: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """`whole` (the same on every process) as a tensor sharded like `like`; no communication."""
    if not is_dtensor(like):
        return whole.to(like.device, like.dtype)
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(whole.to(like.device, like.dtype), like.device_mesh, like.placements,
                             src_data_rank=None)


@dataclass
class Sharding:
    """The policy's FSDP units and what a step does with them on this process."""

    lm: Any  # the root FSDP module (the peft model under LoRA)
    rank: int
    size: int
    version: int = 0  # bumped by every optimizer step and weight load: a cached full state is stale after it
    cache: dict = field(default_factory=dict)

    def units(self) -> list[Any]:
        from torch.distributed.fsdp import FSDPModule

        return [m for m in self.lm.modules() if isinstance(m, FSDPModule)]

    @contextlib.contextmanager
    def gathered(self, training: bool = False) -> Iterator[None]:
        """Every unit's weights gathered once (a collective), used by every forward and backward inside without
        further collectives except the last backward's gradient reduction; sharded again at the end."""
        self.lm.set_reshard_after_forward(False)
        if training:
            self.lm.set_reshard_after_backward(False)
        for unit in self.units():
            unit.unshard()
        try:
            yield
        finally:
            for unit in self.units():
                unit.reshard()
            self.lm.set_reshard_after_forward(True)
            self.lm.set_reshard_after_backward(True)
            self.lm.set_requires_gradient_sync(True)

    def sync(self, last: bool) -> None:
        """Reduce the gradients at this backward (the process's last micro-batch) or only accumulate them."""
        self.lm.set_requires_gradient_sync(last)

    def empty_backward(self, model: Any) -> None:
        """A zero-weighted backward of one token: a process without rows joins the gradient reduction."""
        self.sync(True)
        device = next(model.parameters()).device
        logits = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device)).logits
        (logits.float().sum() * 0.0).backward()

    def total(self, value: float) -> float:
        """`value` summed over the processes."""
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())

    def sum_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """An update's sums over the processes (MAXED keys: the largest)."""
        keys = sorted(stats)
        summed = torch.tensor([0.0 if k in MAXED else float(stats[k]) for k in keys], dtype=torch.float64)
        maxed = torch.tensor([float(stats[k]) if k in MAXED else 0.0 for k in keys], dtype=torch.float64)
        dist.all_reduce(summed)
        dist.all_reduce(maxed, op=dist.ReduceOp.MAX)
        return {k: float(m if k in MAXED else s) for k, s, m in zip(keys, summed.tolist(), maxed.tolist())}

    def share(self, rows: int) -> tuple[int, int]:
        """This process's contiguous block [lo, hi) of `rows` rows."""
        return rows * self.rank // self.size, rows * (self.rank + 1) // self.size

    def full_state(self, trained: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The trained tensors whole, on rank 0 (the writer). Every process calls it together (a checkpoint), and
        each remembers the weights' version: called again before a step (the run's end, where rank 0 alone saves
        the weights of the final checkpoint), nobody gathers, and rank 0 answers from its copy; the other
        processes answer with their shards, which nobody writes (a second whole copy there would be waste)."""
        if self.cache.get("version") == self.version:
            return self.cache["state"]
        state = {name: full(p.detach()) for name, p in trained.items()}
        shards = {name: p.detach().to_local() if is_dtensor(p) else p.detach() for name, p in trained.items()}
        self.cache = {"version": self.version, "state": state if self.rank == 0 else shards}
        return state


def process_group() -> tuple[int, int]:
    """(rank, processes) of the process group this process joined (train/distributed.py start), else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def sampling_seed(seed: int, rank: int) -> int:
    """Rank r's sampling seed: run.seed on rank 0 (a 1-process run samples as before), distinct on the others."""
    return seed if rank == 0 else seed + 1_000_003 * rank


def shard(lm: Any, rank: int, size: int, lora: bool, log: Log) -> Sharding:
    """FSDP2 over the policy: each decoder layer a unit, the root the rest; gradients summed, not averaged."""
    from torch.distributed.fsdp import fully_shard

    from trmkit.rl.lm.lora import decoder_layers

    layers = decoder_layers(lm)
    for layer in layers:
        fully_shard(layer)
    fully_shard(lm)
    sharding = Sharding(lm, rank, size)
    for unit in sharding.units():  # not recursive in torch 2.13: each unit's own
        unit.set_gradient_divide_factor(1.0)  # each process's loss is its share of the whole step's (a sum)
        unit.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no PREMUL_SUM)
    body = ThroughRoot(lm, lm.get_decoder())
    lm.get_decoder = lambda: body  # this instance only: logprobs.py's call of the body goes through the root
    what = ("the frozen base and the LoRA adapters (FSDP2 over the peft model runs on CPU/gloo; only the adapters "
            "have gradients to reduce)" if lora else "every weight (full fine-tune)")
    log(f"distributed: the LM policy is sharded with FSDP2 fully_shard over {size} processes "
        f"({len(layers)} decoder layers + the root each a unit; {what}): at rest each process holds 1/{size} of "
        "the weights, gradients and optimizer state; a round and an update gather the whole policy once "
        "(rollouts differ in length per process) and each process rolls out its share of every call's rows "
        "(rl/lm/fsdp.py; FSDP1 refuses a CPU-only machine)")
    return sharding


class ThroughRoot:
    """The decoder body as logprobs.py calls it (`model.get_decoder()(...)`: hidden states, no lm_head), run
    through the root module's forward so that FSDP's root hooks see it: a body called alone would leave the
    root unit's gradients (embeddings, final norm, a tied head) unreduced. The root computes the logits of the
    last position only (`logits_to_keep=1`); the body's output is taken by a forward hook. Every other attribute
    is the decoder's (`.layers`)."""

    def __init__(self, root: Any, decoder: Any):
        self.root, self.decoder = root, decoder

    def __call__(self, **kwargs: Any) -> Any:
        box: dict = {}
        handle = self.decoder.register_forward_hook(lambda _m, _a, out: box.setdefault("out", out))
        try:
            self.root(**kwargs, logits_to_keep=1)
        finally:
            handle.remove()
        return box["out"]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.decoder, name)


class ShardedOptimizer:
    """The optimizer of sharded parameters as the trainer sees it: `state` reads whole tensors (every process
    reads it together, as a checkpoint does); whole tensors written into it (a resume) are cut to this
    process's shard before the next step."""

    def __init__(self, inner: torch.optim.Optimizer, sharding: Sharding):
        self.inner, self.sharding = inner, sharding
        self.state = _WholeState(inner)

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups

    def step(self) -> None:
        for p, st in self.inner.state.items():
            for key, value in st.items():
                if torch.is_tensor(value) and is_dtensor(p) and not is_dtensor(value) and value.dim() > 0:
                    st[key] = shard_of(value, p)
        self.inner.step()
        self.sharding.version += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)


class _WholeState:
    """opt.state as train/state.py reads it (`items()`: whole tensors) and writes it (`[p][key] = tensor`)."""

    def __init__(self, inner: torch.optim.Optimizer):
        self.inner = inner

    def items(self) -> list[tuple[Any, dict]]:
        return [(p, {k: full(v) if torch.is_tensor(v) else v for k, v in st.items()})
                for p, st in self.inner.state.items()]

    def __getitem__(self, p: Any) -> dict:
        return self.inner.state[p]


@dataclass
class ShardedRollout:
    """One `generate` call of several processes: this process's rows [lo, lo + local.rows) and every row's text."""

    local: Any  # rl/lm/generate.py Rollout, or None when this process holds no row of the call
    lo: int
    texts: list[str]
    truncated: int

    @property
    def response_mask(self) -> torch.Tensor:
        return self.local.response_mask if self.local is not None else torch.zeros((0, 0), dtype=torch.bool)

    def held(self, rows: slice) -> tuple[slice | None, torch.Tensor]:
        """The local rows of the call's rows `rows` (None: none here) and their positions within `rows`."""
        n = self.local.rows if self.local is not None else 0
        lo, hi = max(rows.start, self.lo), min(rows.stop, self.lo + n)
        if hi <= lo:
            return None, torch.zeros(0, dtype=torch.long)
        return slice(lo - self.lo, hi - self.lo), torch.arange(lo - rows.start, hi - rows.start)


def sharded_rollout(sharding: Sharding, run: Callable[[list[str]], Any], prompts: list[str], samples: int
                    ) -> ShardedRollout:
    """`run(rows' prompts)` (one sample each) on this process's block of the call's prompt-major rows; every
    process's texts gathered in row order."""
    rows = [p for p in prompts for _ in range(samples)]
    lo, hi = sharding.share(len(rows))
    local = run(rows[lo:hi]) if hi > lo else None
    parts: list = [None] * sharding.size
    dist.all_gather_object(parts, (local.texts if local is not None else [],
                                   local.truncated if local is not None else 0))
    texts = [t for part, _ in parts for t in part]
    truncated = round(sum(n for _, n in parts) / max(1, samples))  # rows cut -> prompts cut
    return ShardedRollout(local, lo, texts, truncated)
