"""Accuracy per CPU-hour: train a config for a wall-clock budget on a fixed Sudoku set.

`trmkit bench --learn MINUTES CONFIG` builds (once) a fixed generated Sudoku
set, trains CONFIG on it with the training loop's own pieces
(`loop.prepare`, `train_step`, `loop.run_eval`: the same planner, step,
memory guard and EMA evaluation as `trmkit train`) and evaluates the
held-out puzzles every `every` minutes of training and at the end.

How time is counted:
- The budget is *training* time: the steps themselves, including a
  torch.compile warm-up when the planner turns compile on and the memory
  guard's reads. Evaluation is timed separately and excluded (each point
  reports its own `eval_seconds`; `wall_minutes` includes it). Set-up is
  excluded too: building or reading the data set, the planner's one-off
  speed measurements, building the model.
- A point is taken after the first step that brings training time to or
  past each mark, so its `minutes` is the time actually trained (at most
  one step past the mark), never the nominal mark; every point has at
  least one more step than the one before.
- Only the budget stops training, not train.max_steps. By default
  (`schedule="budget"`) the learning-rate schedule is fitted to the budget:
  after FIT_AFTER_S seconds of training the driver measures seconds per step
  and sets train.max_steps to the steps the whole budget allows, so the
  cosine ends when the budget does (printed with the measured speed; a later
  slowdown leaves the lr above its floor at the end, a speed-up puts it on
  the floor early). With `schedule="config"` the config's train.max_steps is
  kept, and past it the lr stays at lr * lr_min_ratio.
- Evaluation uses the EMA weights when EMA is on (as `run_eval` does), on
  every held-out puzzle (data.eval_limit is set to 0).

The fixed set (`LearnSet`, defaults): 1000 training puzzles with 24-26
givens, each with 100 augmented copies (101,000 training examples; the
stream draws one copy per puzzle per epoch), and 200
held-out puzzles (not augmented), generated with seed 0; every puzzle has
exactly one solution. It is reused when the directory's meta.json records
the same build arguments, and rebuilt otherwise.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

from trmkit import config as config_mod
from trmkit.config import Config, ConfigError
from trmkit.data.store import StoreError, open_split
from trmkit.data.sudoku import build_sudoku, parse_givens
from trmkit.hardware import HardwareInfo
from trmkit.train import loop
from trmkit.train.step import train_step

Log = Callable[[str], None]
DEFAULT_DATA_DIR = "data/learn-sudoku"
SCHEDULES = ("budget", "config")
FIT_AFTER_S = 30.0  # training seconds timed before the lr schedule is fitted to the budget


@dataclass(frozen=True)
class LearnSet:
    """The fixed generated Sudoku set a learning curve is measured on."""

    train_puzzles: int = 1000  # generated puzzles in the training split
    test_puzzles: int = 200  # held-out puzzles (never augmented)
    givens: str = "24-26"  # givens per puzzle: N or A-B
    aug: int = 100  # augmented copies per training puzzle (digit relabelling, transposition, row/column moves)
    seed: int = 0  # generator and split seed

    def __post_init__(self) -> None:
        if self.train_puzzles < 1 or self.test_puzzles < 1:
            raise ConfigError("the learning set needs at least one training and one test puzzle")

    def build_args(self) -> dict[str, Any]:
        """build_sudoku's arguments, named as meta.json's "build" section records them."""
        total = self.train_puzzles + self.test_puzzles
        return {"source": "generate", "num_generate": total, "test_fraction": self.test_puzzles / total,
                "aug": self.aug, "givens": list(parse_givens(self.givens)), "limit": None,
                "min_guesses": 0, "max_guesses": None, "seed": self.seed, "require_unique": True}


FIXED_SET = LearnSet()  # the set `trmkit bench --learn` measures on


def recorded_args(data_dir: Path, keys) -> dict[str, Any] | None:
    """The build arguments stored in data_dir/train/meta.json (None: no readable store)."""
    try:
        build = open_split(data_dir / "train").meta.build or {}
    except (StoreError, OSError, ValueError):
        return None
    return {k: build.get(k) for k in keys}


def ensure_dataset(spec: LearnSet, data_dir: str | Path, log: Log = print) -> bool:
    """Reuse data_dir when it was built with spec's arguments, else (re)build it. True if built."""
    data_dir, want = Path(data_dir), spec.build_args()
    found = recorded_args(data_dir, want)
    if found == want:
        log(f"learn: reusing {data_dir} (meta.json build arguments match)")
        return False
    if found is not None:
        changed = ", ".join(f"{k}: {found[k]} -> {want[k]}" for k in want if found[k] != want[k])
        log(f"learn: {data_dir} was built with other arguments ({changed}); rebuilding it")
    log(f"learn: building {data_dir}: {spec.train_puzzles} + {spec.test_puzzles} puzzles with "
        f"{spec.givens} givens, aug {spec.aug}, seed {spec.seed}")
    try:
        built = build_sudoku("generate", data_dir, test_fraction=want["test_fraction"], aug=spec.aug,
                             num_generate=want["num_generate"], givens=spec.givens, seed=spec.seed, log=log)
    except (ValueError, FileExistsError, OSError) as err:
        raise ConfigError(f"--data-dir {data_dir}: {err}") from err
    if (built.train_groups, built.test_groups) != (spec.train_puzzles, spec.test_puzzles):
        raise ConfigError(f"{data_dir}: built {built.train_groups} + {built.test_groups} puzzles, "
                          f"wanted {spec.train_puzzles} + {spec.test_puzzles}")
    return True


def marks(minutes: float, every: float | list[float] | None = None) -> list[float]:
    """Training-time marks in minutes, ending with `minutes`.

    every: a period (every, 2*every, ... below minutes), or a list of marks
    (those below minutes, sorted); None means minutes / 4.
    """
    every = minutes / 4 if every is None else every
    if isinstance(every, list):
        if minutes <= 0 or any(m <= 0 for m in every):
            raise ConfigError(f"--learn {minutes} --every {','.join(f'{m:g}' for m in every)}: "
                              "every mark must be > 0 minutes")
        return sorted({m for m in every if m < minutes - 1e-9}) + [minutes]
    if minutes <= 0 or every <= 0:
        raise ConfigError(f"--learn {minutes} --every {every}: both must be > 0 minutes")
    count = int(minutes / every + 1e-9)
    out = [k * every for k in range(1, count + 1) if k * every < minutes - 1e-9]
    return out + [minutes]


def parse_every(text: str | None) -> float | list[float] | None:
    """--every: '5' (a period) or '15,30' (the marks themselves), in minutes."""
    if text is None:
        return None
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--every {text}: write minutes, e.g. 5, or a list of marks, e.g. 15,30") from None
    return values if "," in text else values[0]


@dataclass
class Point:
    """One evaluation of the held-out puzzles during a learning run."""

    minutes: float  # training time so far, evaluation excluded
    steps: int  # optimizer steps
    samples: int  # slot updates (steps x batch_size), as samples/s counts them
    samples_started: int  # training examples drawn from the set (one copy of each of the 1000 puzzles per epoch)
    blank_accuracy: float  # held-out cells that were blank in the puzzle
    exact_accuracy: float  # held-out puzzles with every cell right
    cell_accuracy: float  # every held-out cell, givens included
    loss: float
    act_steps: float  # mean supervision steps at which the halting head would stop
    lr: float  # learning rate of the last step
    eval_seconds: float  # this evaluation's time (not in `minutes`)
    wall_minutes: float  # since the first step, evaluations included
    load_average: float  # the machine's 1-minute load average at this point


def learning_curve(cfg: Config, hw: HardwareInfo, minutes: float, every: float | list[float] | None = None,
                   data_dir: str | Path = DEFAULT_DATA_DIR, spec: LearnSet | None = None, log: Log = print,
                   cache_dir: Path | None = None, schedule: str = "budget") -> list[Point]:
    """Train cfg for `minutes` of training time on the fixed set (default FIXED_SET); evaluate at each mark."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"--schedule {schedule}: choose one of {', '.join(SCHEDULES)}")
    points_at, spec = marks(minutes, every), spec or FIXED_SET
    ensure_dataset(spec, data_dir, log)
    cfg = config_mod.replace(cfg, "data", path=str(data_dir), eval_limit=0)
    s = loop.prepare(cfg, hw, log=log, cache_dir=cache_dir)
    log(f"learn: {minutes:g} min of training, evaluated at {', '.join(f'{m:g}' for m in points_at)} min "
        f"on {len(s.test_split)} held-out puzzles; evaluation time is not counted; load average "
        f"{psutil.getloadavg()[0]:.2f} at start")
    fit_at = min(FIT_AFTER_S, minutes * 60 / 2) if schedule == "budget" else None  # at most half the budget
    return run_curve(s, [60 * m for m in points_at], log, fit_at)


def fit_schedule(s: loop.Session, now_s: float, per_step: float, timed_steps: int, budget_s: float,
                 log: Log) -> None:
    """Set train.max_steps so that the lr schedule ends with the budget, at the speed measured so far."""
    total = max(s.state.step + 1, s.state.step + int((budget_s - now_s) / per_step))
    s.cfg = config_mod.replace(s.cfg, "train", max_steps=total)
    log(f"learn: schedule: train.max_steps={total} (measured {per_step:.3f} s/step over steps 2-"
        f"{timed_steps + 1}; the cosine now ends with the {budget_s / 60:g}-minute budget)")


def run_curve(s: loop.Session, marks_s: list[float], log: Log = print,
              fit_at: float | None = None) -> list[Point]:
    """Steps until each mark (seconds of training time), then an evaluation.

    fit_at: after that many seconds of training, fit the lr schedule to the
    budget (marks_s[-1]); None keeps the config's train.max_steps.
    """
    clock, batch, points = loop.Clock(), s.cfg.train.batch_size, []
    first_done, first_step = None, s.state.step + 1  # speed is timed from the end of the first step (compile)
    on_oom = (lambda err: s.guard.on_oom(s.state.step, err)) if s.guard else None
    for mark in marks_s:
        first = s.state.step  # at least one step per point, even when a step outlasts the interval
        while clock.train_seconds() < mark or s.state.step == first:
            metrics = train_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx, on_oom)
            if s.guard is not None:
                s.ctx.micro_batch = s.guard.observe(s.state.step, s.guard.reader.read())
            clock.samples += batch
            now = clock.train_seconds()
            if first_done is None:
                first_done = now
            elif fit_at is not None and now - first_done >= fit_at:
                timed = s.state.step - first_step
                fit_schedule(s, now, (now - first_done) / timed, timed, marks_s[-1], log)
                fit_at = None
            elif s.state.step == s.cfg.train.max_steps:
                log(f"learn: step {s.state.step} = train.max_steps: the lr schedule has ended, lr stays at "
                    f"{metrics['train/lr']:.3g} (train.max_steps=N stretches it)")
        points.append(evaluate_point(s, clock, metrics["train/lr"]))
        log(format_point(points[-1]))
    return points


def evaluate_point(s: loop.Session, clock: loop.Clock, lr: float) -> Point:
    trained = clock.train_seconds()
    t0 = time.perf_counter()
    evals = loop.run_eval(s)
    seconds = time.perf_counter() - t0
    clock.eval_seconds += seconds
    return Point(minutes=trained / 60, steps=s.state.step, samples=clock.samples,
                 samples_started=s.state.samples_started, blank_accuracy=evals["blank_accuracy"],
                 exact_accuracy=evals["exact_accuracy"], cell_accuracy=evals["cell_accuracy"],
                 loss=evals["loss"], act_steps=evals["act_steps"], lr=lr, eval_seconds=seconds,
                 wall_minutes=(time.perf_counter() - clock.start) / 60, load_average=psutil.getloadavg()[0])


def format_point(p: Point) -> str:
    return (f"learn @ {p.minutes:.2f} min (step {p.steps}, {p.samples / max(p.minutes * 60, 1e-9):.0f} "
            f"samples/s): blank {p.blank_accuracy:.3f}, exact {p.exact_accuracy:.3f}, cell "
            f"{p.cell_accuracy:.3f} | eval {p.eval_seconds:.1f} s, load {p.load_average:.2f}")


def format_table(points: list[Point]) -> list[str]:
    """The curve as a fixed-width table."""
    lines = ["minutes  steps   samples  blank_acc  exact_acc  cell_acc  eval_s  load",
             "-------  -----  --------  ---------  ---------  --------  ------  ----"]
    for p in points:
        lines.append(f"{p.minutes:7.2f}  {p.steps:5d}  {p.samples:8d}  {p.blank_accuracy:9.3f}  "
                     f"{p.exact_accuracy:9.3f}  {p.cell_accuracy:8.3f}  {p.eval_seconds:6.1f}  "
                     f"{p.load_average:4.2f}")
    lines.append("minutes = training time; evaluation (eval_s) is not counted in it")
    return lines


def to_json(points: list[Point]) -> list[dict[str, Any]]:
    return [asdict(p) for p in points]
