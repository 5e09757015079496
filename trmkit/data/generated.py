"""Training samples made fresh by a task's generator at every step, resumable exactly.

`data.stream=generate` (docs/tasks.md): instead of sampling a fixed training split, each sample
comes from the task's generator (a maze, a puzzle) with its own random generator
`default_rng([seed, rank, i])` for the i-th sample this process serves, and a curriculum
position `progress = min(1, i * world / data.curriculum_samples)` the generator turns into a
difficulty (easy -> the store's). The stream's whole state is the next index, so a checkpoint
resumes it exactly; a laptop hour never repeats an example. The store still gives the shapes
(meta.json) and the fixed held-out test split.
"""

from __future__ import annotations

from typing import Mapping, Protocol

import numpy as np

from trmkit.data.stream import Batch


class Sampler(Protocol):
    """A task's generator: one example (inputs (L,), labels (L,) token ids) at a difficulty. A generator
    that can label every supervision step with its search's trace (data.trace, built with trace=r and
    trace_steps=N_sup) returns labels (N_sup, L) then, and names its extra label tokens in a class
    attribute `trace_tokens`: ((name, the answer id it stands for), ...)."""

    def __call__(self, rng: np.random.Generator, progress: float) -> tuple[np.ndarray, np.ndarray]:
        """progress in [0, 1]: 0 the easiest the curriculum starts at, 1 the store's difficulty."""

    def describe(self, progress: float) -> str:
        """The difficulty at `progress`, in words (for the log)."""


class GeneratedStream:
    """Endless samples from `sample`, the same for the same (seed, rank, index) whatever came before."""

    def __init__(self, sample: Sampler, seed: int, rank: int = 0, world: int = 1,
                 curriculum_samples: int = 0) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"need 0 <= rank < world, got rank {rank} of {world}")
        self._sample, self._seed, self._rank, self._world = sample, int(seed), rank, world
        self._ramp = int(curriculum_samples)
        self._next = 0  # index of the next sample this process serves
        self.describe = sample.describe

    @property
    def samples_served(self) -> int:
        return self._next

    def progress(self, index: int | None = None) -> float:
        """Where the curriculum stands at sample `index` (default: the next one), 0..1."""
        i = self._next if index is None else index
        return 1.0 if self._ramp <= 0 else min(1.0, i * self._world / self._ramp)

    def take(self, k: int) -> Batch:
        if k < 0:
            raise ValueError(f"take(k) needs k >= 0, got {k}")
        pairs = [self._sample(np.random.default_rng([self._seed, self._rank, i]), self.progress(i))
                 for i in range(self._next, self._next + k)]
        self._next += k
        if not pairs:
            return Batch(np.empty((0, 0), np.uint8), np.empty((0, 0), np.uint8), np.zeros(0, np.int64))
        inputs, labels = (np.stack(x) for x in zip(*pairs))
        return Batch(inputs=inputs, labels=labels, puzzle_ids=np.zeros(k, dtype=np.int64))

    def state_dict(self) -> dict[str, int]:
        return {"generated": self._next, "seed": self._seed, "rank": self._rank, "world": self._world}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        if "generated" not in state:
            raise ValueError("the checkpoint's data position is a store's, this run generates its samples: "
                             "resume with the run's own data.stream")
        if (int(state.get("rank", 0)), int(state.get("world", 1))) != (self._rank, self._world):
            raise ValueError("a generated stream resumes at the same rank of the same number of processes")
        self._seed, self._next = int(state["seed"]), int(state["generated"])

    def position_for(self, states: list[Mapping[str, int]]) -> dict[str, int]:
        """Another number of processes: each continues from the furthest curriculum position any
        old process reached (fresh samples: nothing is repeated, nothing needs replaying)."""
        served = max(int(st["generated"]) * int(st.get("world", 1)) for st in states)
        return {"generated": -(-served // self._world), "seed": int(states[0]["seed"]),
                "rank": self._rank, "world": self._world}
