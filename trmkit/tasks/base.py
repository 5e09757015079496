"""What a task declares, and the helpers every grid task shares.

A task is one `Task` value: its name and shape, its `trmkit data NAME` options (a typed dataclass,
tasks/options.py) and the builder that takes them (and writes a store with `data.store.write_store`),
and the optional hooks the trainer, `eval`, `report` and `bench --learn` call, each with its precise
signature below. The trainer never imports this package: the CLI and the API look the task up by the
store's ``meta.json`` "task" key and hand its hooks to the trainer.

Shapes (docs/tasks.md):
- "grid": per-position outputs, exact-match metrics (Sudoku, Maze, ARC);
- "classify": one label per example, F1 metrics and calibration (e-mail: email/task.py, tasks/classify/).
Self-play RL is not a task shape: it has no store, and plugs into the trainer as an
objective (train/objective.py, trmkit/rl/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Generic, Mapping, Protocol

import numpy as np

from trmkit.config import Config, ConfigError
from trmkit.data.generated import Sampler
from trmkit.data.store import Split, StoreMeta
from trmkit.data.variants import Check, Prefer, Variants
from trmkit.tasks.options import BuildOptions, OptionsT
from trmkit.train.scorer import Scorer

if TYPE_CHECKING:  # a name for types only: importing model/ loads torch, which `trmkit --help` must not
    import torch

    from trmkit.model.parts import PartsFactory

SHAPES = ("grid", "classify")
Log = Callable[[str], None]
ScorerFactory = Callable[[Split], Scorer]  # the test split -> the task's metrics beyond the generic ones
Plots = Callable[[Path, Path], tuple[list[Path], str]]  # (run_dir, out_dir) -> (figures written, Markdown)
VariantsFactory = Callable[[StoreMeta, int], Variants]  # (store meta, count) -> symmetries `eval --vote` uses


@dataclass(frozen=True)
class Checking:
    """What accepts an answer to a problem without its label (`trmkit adapt`): the adapt rounds keep only what it
    accepts. Answers are token rows as the store's labels would hold them (a trace run's answers after its
    trace tokens were folded back into the answer tokens); inputs are the store's input rows."""

    check: Check  # (inputs (b, L) int, answers (b, L) int) -> (b,) bool; never reads a label
    prefer: Prefer | None = None  # among accepted answers to one problem, the higher is kept (maze: -path length)
    describe: str = ""  # one line for the log: what is checked (e.g. "Sudoku rules, givens kept")
    to_label: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    # (inputs, accepted answers) -> the training labels (b, L) in the store's token space (ignore_label_id where
    # no loss); None: the answers themselves
    to_trace: Callable[[np.ndarray, np.ndarray, int, int], np.ndarray] | None = None
    # a trace run's (data.trace) labels per supervision step from accepted labels alone: (inputs (b, L), labels
    # (b, L), the trace's speed, steps K) -> (b, K, L), 0 where unlabelled; None: the last step holds the label


# (the new source's store meta, the user's --checker spec "file.py:function" or None) -> Checking; a task with a
# built-in checker refuses a spec, by name; pairs requires one (ConfigError, naming the file, line and fix)
CheckerFactory = Callable[[StoreMeta, str | None], Checking]
NO_CHECKER = ("task {name} has no checker: adapt needs one to accept answers without labels; add `checker=` to "
              "its Task (docs/tasks.md, Checkers) or, for your own puzzles, build them with `trmkit data pairs` "
              "and pass --checker file.py:function")


class SamplerFactory(Protocol):
    """A task's generator for data.stream=generate, made from the store's meta and the run's config, where it
    reads its own section's knobs (the maze task's `maze:`) and data.trace."""

    def __call__(self, meta: StoreMeta, cfg: Config) -> Sampler: ...


class BeforeTraining(Protocol):
    """Run once the model and the training split exist, before the first step (e-mail: fit the bag's linear
    model, email.input_linear); a resumed run reloads its checkpoint after it."""

    def __call__(self, model: torch.nn.Module, train: Split, class_weights: torch.Tensor | None,
                 log: Log) -> None: ...


class LearnSet(Protocol):
    """The fixed generated set `trmkit bench --learn --task NAME` measures on (learn.py)."""

    @property
    def default_dir(self) -> str: ...  # where it is built unless --data says otherwise

    @property
    def train_groups(self) -> int: ...  # training examples before augmentation

    @property
    def test_groups(self) -> int: ...  # held-out examples

    def build_args(self) -> dict[str, object]:
        """The settings meta.json's "build" section records (a store is reused only when they are all equal)."""
        ...

    def describe(self) -> str:
        """One line for the log: what the set is."""
        ...

    def build(self, data_dir: Path, log: Log) -> tuple[int, int]:
        """Write the store, replacing one built with other arguments (learn.ensure_dataset says so first);
        (training groups, test groups) it holds."""
        ...


@dataclass(frozen=True)
class Task(Generic[OptionsT]):
    """One task: how its data is built, scored and trained (see docs/tasks.md)."""

    name: str  # `trmkit data NAME`, and meta.json's "task"
    shape: str  # one of SHAPES
    summary: str  # one line for --help
    options: type[OptionsT]  # the `trmkit data NAME` options: a BuildOptions dataclass (tasks/options.py)
    build: Callable[[OptionsT, Log], object]  # writes the store at options.out; returns the builder's report
    scorer: ScorerFactory | None = None  # extra metrics (train/scorer.py)
    presets: Mapping[str, str] = field(default_factory=dict)  # name -> configs/*.yaml
    learn_set: LearnSet | None = None  # for `trmkit bench --learn --task NAME`
    plots: Plots | None = None  # what `trmkit report` adds for this task's runs
    sampler: SamplerFactory | None = None  # fresh examples at a difficulty, for data.stream=generate
    variants: VariantsFactory | None = None  # test-time symmetries (`trmkit eval --vote`)
    before_training: BeforeTraining | None = None  # e.g. fit frozen weights from the training split
    model_parts: PartsFactory | None = None  # its pieces of the model (model/parts.py), e.g. a maze trace's fold
    sections: tuple[str, ...] = ()  # the config sections it reads (trmkit/registry.py SECTIONS), e.g. ("maze",)
    checker: CheckerFactory | None = None  # accepts answers without labels (`trmkit adapt`; docs/tasks.md, Checkers)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"task {self.name}: shape {self.shape!r} is not one of {SHAPES}")
        if not (isinstance(self.options, type) and issubclass(self.options, BuildOptions)):
            raise ValueError(f"task {self.name}: options must be a BuildOptions dataclass (tasks/options.py), "
                             f"not {self.options!r}")


def checker_for(task: Task, meta: StoreMeta, spec: str | None) -> Checking:
    """The task's checker for a new source's store (`trmkit adapt`); a task without one is refused, saying
    how to add one."""
    if task.checker is None:
        raise ConfigError(NO_CHECKER.format(name=task.name))
    return task.checker(meta, spec)


def refuse_spec(task: str, spec: str | None, rules: str) -> None:
    """A built-in checker takes no user function: refuse --checker by name (used by sudoku and maze)."""
    if spec is not None:
        raise ConfigError(f"--checker {spec}: task {task} checks answers with its own rules ({rules}); "
                          "--checker file.py:function is for stores built by `trmkit data pairs`: drop it")


def dihedral(grid: np.ndarray, k: int) -> np.ndarray:
    """The k-th of the square's 8 symmetries (0 = identity; 1-3 rotations; 4-7 reflections)."""
    if not 0 <= k < 8:
        raise ValueError(f"dihedral transform {k}: use 0..7")
    out = np.rot90(grid, k % 4)
    return np.ascontiguousarray(out.T if k >= 4 else out)


def dihedral_inverse(grid: np.ndarray, k: int) -> np.ndarray:
    """Undo `dihedral(., k)`."""
    if k >= 4:
        return np.ascontiguousarray(np.rot90(grid.T, -(k % 4)))
    return np.ascontiguousarray(np.rot90(grid, -k))


def dihedral_cells(size: int) -> np.ndarray:
    """(8, size*size): position j of `dihedral(grid, k)` (flattened) holds the grid's position cells[k, j]."""
    index = np.arange(size * size).reshape(size, size)
    return np.stack([dihedral(index, k).reshape(-1) for k in range(8)])
