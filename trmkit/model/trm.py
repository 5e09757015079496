"""The Tiny Recursive Model (Jolicoeur-Martineau, 2025) with ACT halting.

One supervision step (paper, Fig. 3):
    x = embed(puzzle prefix ++ tokens)
    repeat T times (the first T-1 without gradients):
        repeat n times: z_L <- net(z_L, z_H + x)
        z_H <- net(z_H, z_L)
    y_hat = lm_head(z_H), q_halt = q_head(z_H[:, 0])
A classifier (model.num_classes > 0, e.g. e-mail) reads one label per example
instead: y_hat = class_head(mean of z_H over the token positions), (B, 1, C);
the recursion, deep supervision and halting are the same.
The carried state (z_H, z_L) is detached between supervision steps. Training
runs up to N_sup supervision steps per sample; a sample halts when q_halt > 0
(or at N_sup), and with probability `halt_exploration_prob` a random minimum
number of steps in [2, N_sup] is drawn first. Evaluation runs all N_sup steps.

Departures / choices beyond the paper (following the reference code):
- The Q head has two outputs (halt, continue) for parameter-count parity with
  the reference; only the halt logit is used (the paper's TRM drops the
  continue loss).
- The puzzle embedding is a buffer updated by sign-SGD on the rows in use,
  so it is not counted among the trainable parameters.
- Token and prefix embeddings are scaled by sqrt(D) after concatenation.
- With model.puzzle_emb_dim set (the reference's ARC recipe: D values per
  puzzle), the learned row is zero-padded to the prefix's puzzle_emb_len * D.
- model.part_positions (ours): the input's last positions are not mixed; the task's model part reads
  them (the e-mail bag of n-grams: its mean embedding added to every token position, a frozen linear
  model of its ids added to the class logits; trmkit/email/parts.py).
- model.mixer=conv (ours, for grid tasks; layers.GridConv): no prefix and no positions;
  the halting head reads the mean of z_H over the grid instead of the first position.
- An application's own pieces are `Part`s (model/parts.py) the TRM composes, never branches here: e.g. the
  maze task's trace (data.trace) gives the token head extra outputs, each standing for an answer id, and
  `answer_logits` folds them into the answer (tasks/maze/fold.py); the e-mail part reads the bag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch
from torch import nn

from trmkit.config import ModelConfig
from trmkit.model.layers import Network, rotary_tables
from trmkit.model.parts import Part, Reading


@dataclass
class Carry:
    """Per-slot recurrent state that persists across optimizer steps."""

    z_H: torch.Tensor  # (B, S, D) answer state y
    z_L: torch.Tensor  # (B, S, D) latent reasoning state z
    steps: torch.Tensor  # (B,) int32 supervision steps taken by the slot's sample
    halted: torch.Tensor  # (B,) bool: the slot takes a new sample at the next step


class Embedded(NamedTuple):
    """A supervision step's reading of its input: the network's input x (B, S, D), and what each part read
    of it (`Part.read_input`: e.g. the e-mail bag's pooled embedding and fitted logits), one per part."""

    x: torch.Tensor
    reads: tuple[Reading, ...] = ()

    def rows(self, keep: torch.Tensor) -> "Embedded":
        """The same reading for the rows `keep` selects (a boolean mask or indices)."""
        return Embedded(self.x[keep], tuple(tuple(None if t is None else t[keep] for t in r) for r in self.reads))


def input_dtype(vocab_size: int) -> torch.dtype:
    """Token ids as the carry keeps them: uint8 for puzzle vocabularies, int32 for a tokenizer's."""
    return torch.uint8 if vocab_size <= 256 else torch.int32


def puzzle_width(cfg: ModelConfig) -> int:
    """Values learned per puzzle: puzzle_emb_dim, or the whole prefix (puzzle_emb_len * D) when 0."""
    return cfg.puzzle_emb_dim or cfg.puzzle_emb_len * cfg.hidden_size


class PuzzleEmbedding(nn.Module):
    """Per-puzzle learned prefix, stored as a buffer and trained by sign-SGD.

    In training, `forward` hands out a leaf copy of the rows in use and records
    it, so the optimizer can update exactly those rows (see train/optim.py).
    """

    def __init__(self, num_ids: int, width: int):
        super().__init__()
        self.register_buffer("weight", torch.zeros(num_ids, width))
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.weight[ids]  # (B, P*D)
        if self.training and torch.is_grad_enabled():
            rows = rows.detach().requires_grad_(True)
            self.pending.append((ids, rows))
        return rows

    def take_pending(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        pending, self.pending = self.pending, []
        return pending


class TRM(nn.Module):
    """TRM(cfg, parts): embeddings, one shared network, output and halting heads, and the application's
    parts (model/parts.py; none for Sudoku), which every reader of an answer sees through `answer_logits`."""

    def __init__(self, cfg: ModelConfig, parts: Sequence[Part] = ()):
        super().__init__()
        if cfg.vocab_size < 1 or cfg.seq_len < 1 or cfg.num_puzzle_ids < 1:
            raise ValueError("ModelConfig.vocab_size/seq_len/num_puzzle_ids come from the "
                             "dataset's meta.json; set them before building TRM")
        if cfg.mixer == "conv" and cfg.grid_height * cfg.grid_width != cfg.seq_len:
            raise ValueError(f"model.mixer=conv needs the grid's shape (model.grid_height x grid_width = "
                             f"seq_len {cfg.seq_len}): it comes from the store's meta.json (grid_shape)")
        self.cfg = cfg
        self.grad_checkpointing = False  # set by the planner: recompute the gradient cycle in backward
        self.train_cycles: tuple[int, int] | None = None  # (T, n) of training steps (train/depth.py), else cfg's
        D, P = cfg.hidden_size, cfg.puzzle_emb_len
        self.seq_total = cfg.network_positions
        self.embed_scale = math.sqrt(D)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, D)
        std = 1.0 / math.sqrt(D)
        nn.init.trunc_normal_(self.embed_tokens.weight, std=std, a=-2 * std, b=2 * std)
        self.puzzle_emb = PuzzleEmbedding(cfg.num_puzzle_ids, puzzle_width(cfg)) if P > 0 else None
        self.net = Network(cfg, self.seq_total)
        if cfg.num_classes:  # a classifier: one label per example, no per-token head
            head = self.class_head = nn.Linear(D, cfg.num_classes, bias=True)
            nn.init.trunc_normal_(self.class_head.weight, std=std, a=-2 * std, b=2 * std)
            nn.init.zeros_(self.class_head.bias)
        else:
            extra = sum(part.extra_outputs for part in parts)
            head = self.lm_head = nn.Linear(D, (cfg.answer_vocab or cfg.vocab_size) + extra, bias=False)
            nn.init.trunc_normal_(self.lm_head.weight, std=std, a=-2 * std, b=2 * std)
        self.parts = nn.ModuleList(parts)  # a part without weights adds nothing to the state dict
        for part in self.parts:  # its weights' random draws here, after the head's, in every model
            part.build(cfg, head)
        self.q_head = nn.Linear(D, 2, bias=True)
        with torch.no_grad():  # start by never halting early (paper: bias -5)
            self.q_head.weight.zero_()
            self.q_head.bias.fill_(-5.0)
        self.register_buffer("H_init", nn.init.trunc_normal_(torch.empty(D), std=1.0, a=-2, b=2))
        self.register_buffer("L_init", nn.init.trunc_normal_(torch.empty(D), std=1.0, a=-2, b=2))
        if cfg.mixer == "attention":
            cos, sin = rotary_tables(self.seq_total, D // cfg.num_heads, cfg.rope_theta)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def initial_carry(self, batch: int, device: torch.device | None = None) -> Carry:
        """A carry whose slots are all halted: the first step fills every slot."""
        device = device or self.H_init.device
        shape = (batch, self.seq_total, self.cfg.hidden_size)
        return Carry(
            z_H=self.H_init.to(device).expand(shape).clone(),
            z_L=self.L_init.to(device).expand(shape).clone(),
            steps=torch.zeros(batch, dtype=torch.int32, device=device),
            halted=torch.ones(batch, dtype=torch.bool, device=device),
        )

    def reset(self, carry: Carry) -> Carry:
        """Halted slots restart from the initial states with a step count of 0."""
        h = carry.halted.view(-1, 1, 1)
        return Carry(
            z_H=torch.where(h, self.H_init.to(carry.z_H.dtype), carry.z_H),
            z_L=torch.where(h, self.L_init.to(carry.z_L.dtype), carry.z_L),
            steps=torch.where(carry.halted, torch.zeros_like(carry.steps), carry.steps),
            halted=carry.halted,
        )

    def reset_(self, carry: Carry) -> None:
        """`reset` in place: no second copy of the carry (for the paper's batch of 768, 305 MB)."""
        slots = torch.nonzero(carry.halted).flatten()
        if len(slots):
            carry.z_H[slots] = self.H_init.to(carry.z_H.dtype)
            carry.z_L[slots] = self.L_init.to(carry.z_L.dtype)
            carry.steps[slots] = 0

    def embed_input(self, inputs: torch.Tensor, puzzle_ids: torch.Tensor) -> Embedded:
        """What every supervision step reads of the input, which no step changes: computed once by a
        caller that runs several steps on the same examples (e-mail predict), else by each step. The
        parts read the input first (`Part.read_input`), then add to the token embeddings."""
        reads = tuple(part.read_input(inputs, self.embed_tokens) for part in self.parts)
        n = self.cfg.part_positions
        x = self.embed_tokens(inputs[:, :-n].long() if n else inputs.long())  # (B, L - n, D): the mixer's positions
        for part, reading in zip(self.parts, reads):
            x = part.add_to_tokens(x, reading)
        if self.puzzle_emb is not None:
            rows = self.puzzle_emb(puzzle_ids.long())  # (B, width)
            pad = self.cfg.puzzle_emb_len * self.cfg.hidden_size - rows.shape[1]
            if pad:  # the reference's ARC embedding: D values, the rest of the prefix zeros
                rows = torch.nn.functional.pad(rows, (0, pad))
            prefix = rows.view(x.shape[0], self.cfg.puzzle_emb_len, -1)
            x = torch.cat([prefix.to(x.dtype), x], dim=1)  # (B, S, D)
        return Embedded(self.embed_scale * x, reads)

    def _positions(self, length: int):
        """What the mixer knows of positions: rotary tables for the first `length` positions (attention;
        a policy's groups are shorter than seq_len), the grid's (H, W) (conv), nothing (mlp_t)."""
        if self.cfg.mixer == "attention":
            return self.rope_cos[:length], self.rope_sin[:length]
        if self.cfg.mixer == "conv":
            return self.cfg.grid_height, self.cfg.grid_width
        return None

    def _net(self, h, injection, positions):
        return self.net(h, injection, positions, recompute=self.grad_checkpointing and torch.is_grad_enabled())

    def cycles(self) -> tuple[int, int]:
        """(T, n) of this call: the depth curriculum's in training (train/depth.py), else the config's."""
        if self.training and self.train_cycles is not None:
            return self.train_cycles
        return self.cfg.H_cycles, self.cfg.L_cycles

    def latent_recursion(self, z_H, z_L, x, positions, n: int | None = None):
        for _ in range(self.cfg.L_cycles if n is None else n):
            z_L = self._net(z_L, z_H + x, positions)  # (B, S, D)
        z_H = self._net(z_H, z_L, positions)  # (B, S, D)
        return z_H, z_L

    def halt_logit(self, z_H: torch.Tensor) -> torch.Tensor:
        """q_halt (B,): read from the first position (the puzzle prefix), or from the mean over the
        grid for the conv mixer, whose cells are all alike (no prefix, no first position)."""
        read = z_H.mean(dim=1) if self.cfg.mixer == "conv" else z_H[:, 0]
        return self.q_head(read).float()[:, 0]

    def output(self, z_H: torch.Tensor, reads: tuple[Reading, ...] = ()) -> torch.Tensor:
        """Token logits (B, L, V) of the answer state; a classifier's class logits (B, 1, C), read from
        the mean over the token positions (every position has seen the whole input through the mixer),
        plus what each part adds from what it read of the input (`Part.class_logits`; `reads` from
        `embed_input`, none: each part's empty reading)."""
        tokens = z_H[:, self.cfg.puzzle_emb_len:]
        if not self.cfg.num_classes:
            return self.lm_head(tokens)
        logits = self.class_head(tokens.mean(dim=1))  # (B, C)
        for part, reading in zip(self.parts, reads or ((),) * len(self.parts)):
            logits = part.class_logits(logits, reading)
        return logits.unsqueeze(1)

    @property
    def extra_outputs(self) -> int:
        """Token-head outputs past the answer vocabulary, the parts' (a maze trace's tokens)."""
        return sum(part.extra_outputs for part in self.parts)

    def answer_logits(self, logits: torch.Tensor, inputs: torch.Tensor | None = None) -> torch.Tensor:
        """The answer's logits (B, L, V) from a step's, each part's `answer` applied in turn (a trace's tokens
        folded into the answer ids they stand for; given the step's `inputs`, a maze's route read from them);
        without parts, the logits themselves. Training's loss reads a step's own logits; everything that
        reads an answer reads these."""
        for part in self.parts:
            logits = part.answer(logits, inputs)
        return logits

    def settled(self, logits: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The first part's word on whether each example's read answer is complete, with that answer's ids
        (Part.settled); None where no part can say."""
        for part in self.parts:
            done = part.settled(logits, inputs)
            if done is not None:
                return done
        return None

    def forward(self, z_H: torch.Tensor, z_L: torch.Tensor, inputs: torch.Tensor,
                puzzle_ids: torch.Tensor, embedded: Embedded | None = None):
        """One supervision step. Returns (z_H, z_L) detached, logits (B, L, V) or (B, 1, C), q_halt (B,).
        `embedded`: `embed_input(inputs, puzzle_ids)` computed before, rows in the same order."""
        x, reads = embedded if embedded is not None else self.embed_input(inputs, puzzle_ids)
        positions, (t, n) = self._positions(x.shape[1]), self.cycles()
        with torch.no_grad():
            for _ in range(t - 1):
                z_H, z_L = self.latent_recursion(z_H, z_L, x, positions, n)
        z_H, z_L = self.latent_recursion(z_H, z_L, x, positions, n)
        logits = self.output(z_H, reads)  # (B, L, V), or (B, 1, C) for a classifier
        q_halt = self.halt_logit(z_H)  # (B,)
        return z_H.detach(), z_L.detach(), logits, q_halt


def resized(model: TRM, height: int, width: int) -> TRM:
    """A conv model's copy for height x width grids, holding the same weights (a conv TRM reads any size): for
    `trmkit eval` / predict on another grid, and an adaptation's run scoring its own smaller held-out split.
    Built under a forked random state, so that making it changes no draw of the run that asks for it."""
    import dataclasses

    cfg = dataclasses.replace(model.cfg, seq_len=height * width, grid_height=height, grid_width=width)
    with torch.random.fork_rng(devices=[]):
        other = TRM(cfg, model.parts)
    other = other.to(next(model.parameters()).device)
    other.load_state_dict(model.state_dict())
    other.net.fused_inference = model.net.fused_inference
    return other


def halt_decision(steps: torch.Tensor, q_halt: torch.Tensor, cfg: ModelConfig, training: bool,
                  explore_u: torch.Tensor | None = None,
                  explore_min: torch.Tensor | None = None) -> torch.Tensor:
    """Which slots halt after this step. `steps` already counts this step.

    explore_u (uniform [0,1)) and explore_min (ints in [2, N_sup]) are drawn by
    the caller for the whole batch, so that micro-batching cannot change them.
    """
    at_limit = steps >= cfg.halt_max_steps
    if not training or cfg.halt_max_steps == 1:
        return at_limit
    halted = at_limit | (q_halt.detach() > 0)
    if explore_u is not None and explore_min is not None:
        min_steps = torch.where(explore_u < cfg.halt_exploration_prob, explore_min,
                                torch.zeros_like(explore_min))
        halted = halted & (steps >= min_steps)
    return halted
