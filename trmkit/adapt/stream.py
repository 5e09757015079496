"""The adapted run's training samples: the original training stream, mixed with the kept answers.

Each new sample of a step is, with probability adapt.replay_share (or always while nothing is kept),
the next sample of the original run's own stream (its store, curriculum or generator: replayed so that
old skill is kept); otherwise a kept answer of the new source, drawn uniformly with replacement, under one
of the task's symmetric variants (adapt.augment of them; the same augmentation `eval --vote` undoes). The
i-th sample's draws come from default_rng([seed, i]), so the stream's whole state is the next index, the
kept answers and the original stream's own position: a checkpoint holds them (train/state.py saves the
stream's state_dict) and a resumed run goes on exactly.

A trace run (data.trace: labels (N_sup, L) per sample) trains its kept answers as the final answer at
every supervision step, without a search's trace (the checker's answer is not a solver's output).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from trmkit.data.stream import Batch
from trmkit.data.variants import Variants

MIX = 1  # the stream's index in default_rng([seed, MIX, i]): apart from every other draw seeded by the run's seed


class MixedStream:
    """`base`'s samples and the kept answers to `inputs`' problems, mixed; resumable exactly."""

    def __init__(self, base, inputs: np.ndarray, puzzle_ids: np.ndarray, replay_share: float, seed: int,
                 variants: Variants | None = None, trace_steps: int = 0) -> None:
        self.base, self.inputs, self.puzzle_ids = base, inputs, puzzle_ids
        self.replay_share, self.seed = float(replay_share), int(seed)
        self.variants, self.trace_steps = variants, int(trace_steps)
        self.kept: dict[int, np.ndarray] = {}  # problem -> its label (L,)
        self._order: list[int] = []  # the kept problems, sorted: what a draw indexes
        self._next = 0
        self.replayed = self.adapted = 0  # samples served of each kind in this process (for the log)

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
                labels[i] = y  # broadcast over the trace's steps
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
        return x[0], y[0], int(self.puzzle_ids[p])

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "adapt_next": self._next,
                "kept": {str(p): self.kept[p].tolist() for p in self._order}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "adapt_next" not in state:
            raise ValueError("the checkpoint's data position is a plain run's, not an adaptation's: resume it with "
                             "the command that made it (trmkit train --resume)")
        self.base.load_state_dict(state["base"])
        self._next = int(state["adapt_next"])
        self.kept = {}
        self.keep({int(p): np.asarray(y, np.int64) for p, y in state["kept"].items()})
