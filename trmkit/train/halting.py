"""`trmkit eval --steps auto`: a halting rule that scales with the problem, not with the trained N_sup.

Each example takes supervision steps until its predicted answer (the argmax over every output
position the task answers) has stayed the same for `STABLE_STEPS` consecutive steps, or until the cap.
With train.mask_given the cells whose input is a given token (a maze's walls, S and G) are not read:
they carry no loss, so the model's argmax there is free to flicker, and a 30 x 30 maze then never
stopped before the cap (measured: 128 of 128 steps on every maze; docs/results.md). An example
that stopped is frozen: its logits and halting logit are those of its last step, and it leaves the
batch, so later steps cost only the examples still thinking.

- STABLE_STEPS = 2: one unchanged step is weak evidence (the latent z_L keeps moving while the
  argmax may pause for a step), and every further step of patience costs one more step on every
  example. The value is chosen, not tuned: nothing has measured 1 against 2 or 3 yet.
- A model trained on a search's trace (data.trace) answers in the trace's tokens, and the rule reads
  those, not the answer they fold into (TRM.answer_logits): a maze's answer stays "no route" until the
  wave from G has reached S, which would look stable from the second step, while the trace changes at
  every step until the search is done. Where the model's part can say that its read answer is complete
  (Part.settled; a maze read by walk: the walk from S reaches G through cells the wave has reached), the
  rule compares that read answer instead: the route is known once the wave has passed S, and the trace's
  traceback, which changes the tokens for as many steps again, no longer holds the example.
- The default cap is 4 x the trained N_sup (64 for N_sup = 16, the largest K the maze curves were
  measured at); `--steps auto:K` sets it. A larger problem (a 61 x 61 maze) may need a larger cap.

Departure from the paper: TRM halts with its Q head in training and runs all N_sup steps at test
time; this rule reads only the model's own answers (no labels, no checker), so a problem larger than
the training grids may think longer than N_sup. Measured (docs/results.md): the demo's Sudoku
model reaches K = 16's accuracy at 5.1 steps on average; a 1-thread maze model 0.750 valid paths on
15 x 15 at 10 steps against 0.664 / 0.684 at K = 8 / 32; no gain on 30 x 30, where its paths keep changing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trmkit.config import ConfigError
from trmkit.train.step import answer_cells

STABLE_STEPS = 2  # consecutive steps without a change of the answer before an example stops
CAP_PER_N_SUP = 4  # default cap: this many times the trained N_sup


@dataclass(frozen=True)
class StableAnswer:
    """Stop an example once its answer has not changed for `patience` steps, or at `cap` steps."""

    cap: int
    patience: int = STABLE_STEPS

    def describe(self) -> str:
        return (f"each example stops once its answer has not changed for {self.patience} consecutive steps (a maze "
                f"read by walk: its walked route, once it reaches G), or at {self.cap} steps")


def parse_auto(text: str | None) -> int | None:
    """`--steps auto` -> 0 (the default cap), `auto:64` -> 64; anything else -> None (a list of K)."""
    if text is None or not str(text).strip().lower().startswith("auto"):
        return None
    head, _, cap = str(text).strip().lower().partition(":")
    if head != "auto" or (cap and (not cap.isdigit() or int(cap) < 1)):
        raise ConfigError(f"--steps {text}: write auto, or auto:CAP with a positive cap, e.g. --steps auto:64")
    return int(cap) if cap else 0


def rule_for(cap: int, n_sup: int) -> tuple[StableAnswer, str]:
    """The rule for `--steps auto[:cap]` (cap 0: the default) and the reason for its cap."""
    if cap:
        return StableAnswer(cap), "--steps auto:CAP"
    return StableAnswer(CAP_PER_N_SUP * n_sup), f"the default: {CAP_PER_N_SUP} x the trained N_sup {n_sup}"


def stable_key(model, logits: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """(b, L) what the rule compares between steps: the step's own tokens (a trace's included), or, for an
    example whose read answer a part says is complete (TRM.settled: a maze's walk from S reaching G through
    cells the wave has reached), that read answer, its ids shifted past the step's own so the two never match."""
    own = logits.argmax(-1)
    settled = model.settled(logits, inputs) if hasattr(model, "settled") else None
    if settled is None:
        return own
    done, read = settled  # the read answer's ids come with the verdict: the walks are not run twice
    return torch.where(done.unsqueeze(-1), read + logits.shape[-1], own)


@torch.no_grad()
def think_until_stable(model, inputs: torch.Tensor, pids: torch.Tensor, ctx, rule: StableAnswer
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Supervision steps from a fresh carry until each example's answer is stable (`rule`).

    Returns each example's logits and halting logit at its last step, the first step at which the
    halting head would stop (its last step if never), and the steps it took (B,) int32."""
    B = inputs.shape[0]
    carry = model.initial_carry(B, ctx.device)
    z_H, z_L = carry.z_H, carry.z_L  # (B, S, D), updated in place for the live rows
    live = torch.arange(B, device=ctx.device)
    used = torch.zeros(B, dtype=torch.int32, device=ctx.device)
    first_halt = torch.zeros_like(used)  # 0: not yet
    unchanged = torch.zeros_like(used)
    logits = q = answer = None
    read = answer_cells(inputs, ctx.given_tokens)
    for step in range(1, rule.cap + 1):
        every = len(live) == B  # while no example has stopped: no gathered copy of the carry
        with ctx.autocast():
            zh, zl, part, q_part = model(*((z_H, z_L, inputs, pids) if every else
                                           (z_H[live], z_L[live], inputs[live], pids[live])))
        if every:
            z_H, z_L = zh.to(z_H.dtype), zl.to(z_L.dtype)
        else:
            z_H[live], z_L[live] = zh.to(z_H.dtype), zl.to(z_L.dtype)
        if logits is None:
            logits = part.new_zeros((B, *part.shape[1:]))  # (B, L, V)
            q = q_part.new_zeros(B)
            answer = torch.full((B, part.shape[1]), -1, dtype=torch.long, device=part.device)
        logits[live], q[live] = part, q_part  # the stopped rows keep their last step's (frozen)
        new = stable_key(model, part, inputs if every else inputs[live])  # (b, L)
        same = ((new == answer[live]) | ~read[live][:, :new.shape[1]]).all(-1)  # given cells are not read
        unchanged[live] = torch.where(same, unchanged[live] + 1, torch.zeros_like(unchanged[live]))
        answer[live], used[live] = new, step
        first_halt[live] = torch.where((q_part > 0) & (first_halt[live] == 0), step, first_halt[live])
        live = live[unchanged[live] < rule.patience]
        if not len(live):
            break
    first_halt = torch.where(first_halt == 0, used, first_halt)
    return logits, q, first_halt, used
