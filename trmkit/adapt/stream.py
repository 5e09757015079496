"""The adapted run's training samples: the original training stream, mixed with the kept answers.

Each new sample of a step is, with probability adapt.replay_share (or always while nothing is kept),
the next sample of the original run's own stream (its store, curriculum or generator: replayed so that
old skill is kept); otherwise a kept answer of the new source, drawn uniformly with replacement, under one
of the task's symmetric variants (adapt.augment of them; the same augmentation `eval --vote` undoes). The
i-th sample's draws come from default_rng([seed, MIX, i]), so the stream's whole state is the next index, the
kept answers, the counts served of each kind and the original stream's own position: a checkpoint holds
them (train/state.py saves the stream's state_dict) and a resumed run goes on exactly.

A trace run (data.trace: labels (N_sup, L) per sample) trains a kept answer step by step on the labels the
task's checker derives from that answer alone (Checking.to_trace; mazes: the trace's labels on the accepted
path's cells and "not the route" on the others, tasks/maze/trace.py route_trace), drawn after the sample's
variant, since a trace's tokens are directions. Without a to_trace, the final answer labels the last
supervision step only, the earlier steps unlabelled (0, ignored). The final path at every step asks step 1
for what the trace reaches only after many steps: adapting the 11 x 11 maze-trace model on 30 x 30 mazes
that way, round 1 solved 0 of 40 (docs/adapt.md).

With adapt.reblank, a kept answer of a completion puzzle (each input cell a blank, padding, or the answer's own
token) trains under an input with more of its givens blanked: as many blanks in all as a problem of the new
source drawn at random has (`Reblank`), so the few-blank puzzles solved first teach the many-blank ones still
unsolved. The answer stays a valid one (the checker accepted it, and a blanked given only widens the puzzle);
where the wider puzzle has other answers it is one of them.

A new source of a larger grid (adapt/problems.py `size_change`: a conv model, data.stream=generate) keeps
one length per batch: `InGrid` has the task's generator place the run's own training mazes in the new
grid, and `batch_size_for` picks the step's samples for the longer rows (printed with its reason).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from trmkit.config import ConfigError, ModelConfig
from trmkit.data.stream import Batch
from trmkit.data.variants import Variants
from trmkit.plan.memory_model import Calibration, carry_slot_bytes, micro_slot_bytes

MIX = 1  # the stream's index in default_rng([seed, MIX, i]): apart from every other draw seeded by the run's seed


@dataclasses.dataclass(frozen=True)
class Reblank:
    """adapt.reblank: the blank token, the padding token and the blank counts of the new source's problems."""

    blank: int
    pad: int
    counts: np.ndarray  # (P,) blanks per problem of the adapt part: what a trained input's count is drawn from

    @classmethod
    def of(cls, inputs: np.ndarray, blank: int, pad: int) -> "Reblank":
        return cls(int(blank), int(pad), (np.asarray(inputs) == blank).sum(1).astype(np.int64))

    def apply(self, x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, str]:
        """(x with givens blanked up to a drawn count, "blanked"); x itself with "as_is" when the drawn count is
        not above its own, or "not_completion" when y changes one of x's givens."""
        target = int(self.counts[int(rng.integers(len(self.counts)))])
        blank, pad = x == self.blank, x == self.pad
        given = ~blank & ~pad
        extra = target - int(blank.sum())
        if not bool((x[given] == y[given]).all()):
            return x, "not_completion"
        if extra <= 0:
            return x, "as_is"
        cells = np.flatnonzero(given)
        out = x.copy()
        out[rng.choice(cells, size=min(extra, len(cells)), replace=False)] = self.blank
        return out, "blanked"


class MixedStream:
    """`base`'s samples and the kept answers to `inputs`' problems, mixed; resumable exactly."""

    def __init__(self, base, inputs: np.ndarray, puzzle_ids: np.ndarray, replay_share: float, seed: int,
                 variants: Variants | None = None, trace_steps: int = 0,
                 trace_of: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                 reblank: Reblank | None = None) -> None:
        self.base, self.inputs, self.puzzle_ids, self.reblank = base, inputs, puzzle_ids, reblank
        self.replay_share, self.seed = float(replay_share), int(seed)
        self.variants, self.trace_steps = variants, int(trace_steps)
        self.trace_of = trace_of  # (input (L,), kept label (L,)) -> (trace_steps, L): the kept answer's trace
        self.kept: dict[int, np.ndarray] = {}  # problem -> its label (L,)
        self._order: list[int] = []  # the kept problems, sorted: what a draw indexes
        self._next = 0
        self.replayed = self.adapted = 0  # samples served of each kind (adapt/replay_share), kept in checkpoints
        self.reblanked = {"blanked": 0, "as_is": 0, "not_completion": 0}  # adapt.reblank's outcomes, counted

    def keep(self, labels: Mapping[int, np.ndarray]) -> None:
        """Add accepted answers (problem -> label); a problem kept before keeps its first answer."""
        for p, y in labels.items():
            self.kept.setdefault(int(p), np.asarray(y, dtype=np.int64))
        self._order = sorted(self.kept)

    def take(self, k: int) -> Batch:
        draws = [np.random.default_rng([self.seed, MIX, i]) for i in range(self._next, self._next + k)]
        own = [bool(self._order) and rng.random() >= self.replay_share for rng in draws]  # a kept answer?
        self._next += k
        base = self.base.take(k - sum(own)) if k - sum(own) else None
        inputs = np.zeros((k, self.inputs.shape[1]), np.int64)
        labels = np.zeros((k, *((self.trace_steps,) if self.trace_steps else ()), self.inputs.shape[1]), np.int64)
        pids = np.zeros(k, np.int64)
        j = 0
        for i, (rng, mine) in enumerate(zip(draws, own)):
            if mine:
                inputs[i], y, pids[i] = self._draw(rng)
                if self.trace_steps and self.trace_of is not None:
                    labels[i] = self.trace_of(inputs[i], y)
                elif self.trace_steps:
                    labels[i, -1] = y  # the last supervision step only; the earlier ones stay 0, ignored
                else:
                    labels[i] = y
            else:
                inputs[i], labels[i], pids[i] = base.inputs[j], base.labels[j], base.puzzle_ids[j]
                j += 1
        self.adapted += sum(own)
        self.replayed += k - sum(own)
        return Batch(inputs=inputs, labels=labels, puzzle_ids=pids)

    def _draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
        p = self._order[int(rng.integers(len(self._order)))]
        x, y = self.inputs[p][None], self.kept[p][None]
        if self.variants is not None and len(self.variants) > 1:
            v = int(rng.integers(len(self.variants)))
            x, y = self.variants.apply(x, v), self.variants.apply(y, v)
        x_in = x[0]
        if self.reblank is not None:
            x_in, outcome = self.reblank.apply(x_in, y[0], rng)
            self.reblanked[outcome] += 1
        return x_in, y[0], int(self.puzzle_ids[p])

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "adapt_next": self._next, "replayed": self.replayed,
                "adapted": self.adapted, "reblanked": dict(self.reblanked),
                "kept": {str(p): self.kept[p].tolist() for p in self._order}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "adapt_next" not in state:
            raise ValueError("the checkpoint's data position is a plain run's, not an adaptation's: resume it with "
                             "the command that made it (trmkit train --resume)")
        self.base.load_state_dict(state["base"])
        self._next = int(state["adapt_next"])
        self.replayed, self.adapted = int(state.get("replayed", 0)), int(state.get("adapted", 0))
        self.reblanked = {k: int(state.get("reblanked", {}).get(k, 0)) for k in self.reblanked}
        self.kept = {}
        self.keep({int(p): np.asarray(y, np.int64) for p, y in state["kept"].items()})


MIN_BATCH = 8  # samples a step at least: fewer make each step's mix of replayed and kept answers too coarse


class InGrid:
    """The task's generator (Task.sampler: (store meta, cfg) -> sampler) with its samples placed in a larger
    grid x grid canvas: the run's own training samples, replayed at the new source's length."""

    def __init__(self, factory: Callable[..., Any], grid: int, n_sup: int = 0) -> None:
        self.factory, self.grid, self.n_sup = factory, int(grid), int(n_sup)
        self.trace_tokens = getattr(factory, "trace_tokens", ())  # read before any sampler exists

    def __call__(self, meta: Any, cfg: Any) -> Any:
        sampler = self.factory(meta, cfg)
        if not hasattr(sampler, "in_grid"):
            raise ConfigError(f"the {meta.task} task's generator cannot place its samples in a larger grid "
                              "(no in_grid; tasks/maze/sampler.py has one): adapt to a source of the run's size")
        placed = sampler.in_grid(self.grid)
        return RunSteps(placed, self.n_sup, meta.ignore_label_id) if self.n_sup else placed


class RunSteps:
    """A trace sampler's samples labelled for RUN's own N_sup only: the later rows (the adaptation's longer
    N_sup, for the larger grid's routes) hold the ignore label, so a replayed sample trains as RUN trained it
    and then halts (train/step.py labelled_steps). Run past RUN's N_sup, the model had never been trained on
    a small maze: on RUN's hardest ones its trace drifts (token loss 1.2 at step 16 to 4 at step 48, measured
    on the 61 x 61 base), and those steps' gradients wore the skill down."""

    def __init__(self, sampler: Any, n_sup: int, ignore: int) -> None:
        self.sampler, self.n_sup, self.ignore = sampler, int(n_sup), int(ignore)

    def __getattr__(self, name: str) -> Any:  # the sampler's describe, trace_tokens ...
        if name == "sampler":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __call__(self, rng: Any, progress: float) -> tuple[Any, Any]:
        x, y = self.sampler(rng, progress)
        if y.ndim == 2 and len(y) > self.n_sup:
            y = y.copy()
            y[self.n_sup:] = self.ignore
        return x, y


def batch_size_for(base: ModelConfig, new: ModelConfig, batch_size: int, log: Callable[[str], None]) -> int:
    """train.batch_size for rows of new.seq_len tokens: the run's tokens per step (so a step costs about the
    run's time and memory), at least MIN_BATCH and at most the run's batch; printed with the memory per
    sample of both lengths (plan/memory_model.py; the planner then fits the micro-batch to the budget)."""
    kept = max(1, round(batch_size * base.seq_len / new.seq_len))
    chosen = min(batch_size, max(MIN_BATCH, kept))
    backward = Calibration().backward_calls
    per = {m.seq_len: carry_slot_bytes(m) + micro_slot_bytes(m, 2, False, backward) for m in (base, new)}
    why = (f"{kept} keep the run's {batch_size} x {base.seq_len} tokens a step" +
           (f", raised to {MIN_BATCH}: fewer make each step's mix of replayed and kept answers too coarse"
            if kept < MIN_BATCH else "") + (f", capped at the run's {batch_size}" if kept > batch_size else ""))
    ratio = new.seq_len / base.seq_len
    log(f"adapt: train.batch_size={chosen} for the new grid's {new.seq_len}-token rows ({ratio:.1f}x the run's "
        f"{base.seq_len}): {why}; about {per[new.seq_len] / 2**20:.0f} MiB a sample in training against "
        f"{per[base.seq_len] / 2**20:.1f} MiB at the run's size, {chosen * per[new.seq_len] / 2**30:.2f} GiB a step "
        "before the fixed part (the planner fits the micro-batch to the memory budget below)")
    return chosen
