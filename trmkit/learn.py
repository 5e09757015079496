"""Accuracy per CPU-hour: train a config for a wall-clock budget on a task's fixed generated set.

`trmkit bench --learn MINUTES CONFIG [--task sudoku|maze]` builds (once) the
task's fixed generated set (its `Task.learn_set`), trains CONFIG on it with the one trainer
(train/run.py: the same planner, loop, step, memory guard and EMA evaluation as `trmkit train`)
and evaluates the held-out puzzles every `every` minutes of training and at the end. The curve
is hooks on the training loop (`Curve`), not a loop of its own; the run lives in a temporary
run directory (`keep` keeps its final weights and config), with the loop's periodic evaluations
and checkpoints off (train.eval_every=0, train.checkpoint_every=0, train.checkpoint_minutes=0):
the curve evaluates at its marks, and nothing is saved while it trains.

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
  (`schedule="budget"`) the learning-rate schedule is fitted to the budget as
  `trmkit train --minutes` fits it (train/timefit.py): after FIT_AFTER_S seconds
  of training, and again at 25% and 50% of the budget (and 75% with
  train.depth_curriculum), the driver measures seconds per step and sets
  train.max_steps to the steps the whole budget allows, so the cosine ends when
  the budget does (printed with the measured speed; a slowdown after the last
  fit leaves the lr above its floor at the end, a speed-up puts it on the floor
  early). With `schedule="config"` the config's train.max_steps is
  kept, and past it the lr stays at lr * lr_min_ratio.
- Evaluation uses the EMA weights when EMA is on (as `run_eval` does), on
  every held-out puzzle (data.eval_limit is set to 0).

The task's scorer adds its metrics to each point (maze: valid_path_accuracy).

Sudoku's fixed set (`tasks.sudoku.SudokuLearnSet`, defaults): 1000 training puzzles with 24-26
givens, each with 100 augmented copies (101,000 training examples; the
stream draws one copy per puzzle per epoch), and 200
held-out puzzles (not augmented), generated with seed 0; every puzzle has
exactly one solution. Maze's (`tasks.maze.MazeLearnSet`): 10,000 training
mazes of 15 x 15 with shortest paths of at least 28 steps, each with its 7
other symmetries, and 500 held-out mazes. A set is reused when the
directory's meta.json records the same build arguments, and rebuilt otherwise.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from trmkit import config as config_mod
from trmkit import files, rundir
from trmkit.config import Config, ConfigError
from trmkit.data.store import StoreError, open_split
from trmkit.hardware import HardwareInfo
from trmkit.tasks import sudoku
from trmkit.tasks.base import Task
from trmkit.tasks.sudoku import SudokuLearnSet
from trmkit.train import depth, evaluate, session
from trmkit.train.finish import save_weights
from trmkit.train.hooks import Hooks
from trmkit.train.resume import describe_run, holds_run
from trmkit.train.run import run
from trmkit.train.timefit import TimeFit

Log = Callable[[str], None]
DEFAULT_DATA_DIR = "data/learn-sudoku"  # the Sudoku set's (SudokuLearnSet.default_dir)
SCHEDULES = ("budget", "config")


FIXED_SET = SudokuLearnSet()  # the Sudoku set `trmkit bench --learn` measures on (tasks/sudoku/task.py)


def learn_set(task: Task):
    """The fixed set of a task (Sudoku: FIXED_SET, which tests may replace)."""
    if task.name == sudoku.TASK.name:
        return FIXED_SET
    if task.learn_set is None:
        raise ConfigError(f"--task {task.name}: this task declares no learning set for `bench --learn`")
    return task.learn_set


def recorded_args(data_dir: Path, keys) -> dict[str, Any] | None:
    """The build arguments stored in data_dir/train/meta.json (None: no readable store)."""
    try:
        build = open_split(data_dir / "train").meta.build or {}
    except (StoreError, OSError, ValueError):
        return None
    return {k: build.get(k) for k in keys}


def ensure_dataset(spec, data_dir: str | Path, log: Log = print) -> bool:
    """Reuse data_dir when it was built with spec's arguments, else (re)build it. True if built."""
    data_dir, want = Path(data_dir), spec.build_args()
    found = recorded_args(data_dir, want)
    if found == want:
        log(f"learn: reusing {data_dir} (meta.json build arguments match)")
        return False
    if found is not None:
        changed = ", ".join(f"{k}: {found[k]} -> {want[k]}" for k in want if found[k] != want[k])
        log(f"learn: {data_dir} was built with other arguments ({changed}); rebuilding it")
    log(f"learn: building {data_dir}: {spec.describe()}")
    try:
        built = spec.build(data_dir, log)
    except (ValueError, FileExistsError, OSError) as err:
        raise ConfigError(f"--data-dir {data_dir}: {err}") from err
    if built != (spec.train_groups, spec.test_groups):
        raise ConfigError(f"{data_dir}: built {built[0]} + {built[1]} groups, "
                          f"wanted {spec.train_groups} + {spec.test_groups}")
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
    blank_accuracy: float | None  # held-out cells that were blank in the puzzle (None: the task has no blanks)
    exact_accuracy: float  # held-out puzzles with every cell right
    cell_accuracy: float  # every held-out cell, givens included
    loss: float
    act_steps: float  # mean supervision steps at which the halting head would stop
    lr: float  # learning rate of the last step
    eval_seconds: float  # this evaluation's time (not in `minutes`)
    wall_minutes: float  # since the first step, evaluations included
    load_average: float  # the machine's 1-minute load average at this point
    task_metrics: dict[str, float] = field(default_factory=dict)  # the task scorer's (e.g. valid_path_accuracy)


def learning_curve(cfg: Config, hw: HardwareInfo, minutes: float, every: float | list[float] | None = None,
                   data_dir: str | Path | None = None, spec=None, log: Log = print,
                   cache_dir: Path | None = None, schedule: str = "budget", task: Task = sudoku.TASK,
                   keep: str | Path | None = None, target: tuple[str, float] | None = None,
                   force: bool = False) -> list[Point]:
    """Train cfg for `minutes` of training time on the task's fixed set (Sudoku: FIXED_SET); evaluate at each mark.

    `task`: the Task whose set is measured and whose scorer adds its metrics (the CLI looks it up by name).
    `keep`: a folder that receives the final weights and config, a run directory `trmkit eval` reads; one
    that holds a run is refused unless `force` (check_keep).
    `target`: (metric, value): training stops at the first evaluation that reaches it (the lr schedule
    is still the budget's, so the time is that of the budget's recipe)."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"--schedule {schedule}: choose one of {', '.join(SCHEDULES)}")
    points_at, spec = marks(minutes, every), spec or learn_set(task)
    if keep is not None:
        check_keep(Path(keep), force)  # before the set is built and the minutes are spent
    data_dir = data_dir or spec.default_dir
    ensure_dataset(spec, data_dir, log)
    cfg = config_mod.replace(cfg, "data", path=str(data_dir), eval_limit=0)
    curve = Curve([60 * m for m in points_at], task.name, schedule, log, target,
                  Path(keep) if keep is not None else None)
    with tempfile.TemporaryDirectory(prefix="trmkit-learn-") as tmp:
        cfg = curve_config(cfg, minutes, tmp, log)
        result = run(cfg, hw, hooks=curve, log=log, cache_dir=cache_dir, scorer=task.scorer, sampler=task.sampler,
                     before_training=task.before_training, parts=task.model_parts)
    if result.get("stopped"):
        log(f"learn: stopped by {result['stopped']} after {len(curve.points)} of {len(points_at)} points")
    return curve.points


def curve_config(cfg: Config, minutes: float, run_dir: str, log: Log) -> Config:
    """The config a curve trains: in a temporary run directory, without the loop's own evaluations,
    checkpoints or time fit (the curve evaluates at its marks and fits its schedule to training time)."""
    log(f"learn: run.dir={run_dir} (temporary: --keep DIR keeps the final weights), train.eval_every=0, "
        "train.checkpoint_every=0, train.checkpoint_minutes=0, train.fit_to_time=false (the curve evaluates at "
        f"its marks, saves nothing while it trains, and fits its own schedule), train.max_minutes={minutes:g} "
        "(the planner weighs compile against the budget)")
    cfg = config_mod.replace(cfg, "run", dir=run_dir)
    return config_mod.replace(cfg, "train", max_minutes=minutes, eval_every=0, checkpoint_every=0,
                              checkpoint_minutes=0.0, fit_to_time=False)


# The files a run writes that --keep never does: a folder holding one of them holds a trained run.
RUN_ONLY = (rundir.METRICS, rundir.SUMMARY, rundir.PLAN, rundir.DATA_META, rundir.CHECKPOINTS)


def check_keep(folder: Path, force: bool = False) -> None:
    """--keep DIR: refuse a folder that holds a run (a trained run's weights would be replaced by the curve's)
    unless `force`; one that only an earlier --keep wrote (config and weights, nothing else of a run) is this
    command's own output and is replaced."""
    if force or not holds_run(folder) or not any(rundir.path(folder, name).exists() for name in RUN_ONLY):
        return
    raise ConfigError(f"--keep {folder} holds a run ({describe_run(folder)}): its config and weights would be "
                      "replaced by the curve's; give another --keep DIR, or add --force to replace them")


def keep_run(s: session.Session, run_dir: Path, log: Log) -> None:
    """The final (EMA) weights and the config that built them, so `trmkit eval run_dir` can score them."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = config_mod.replace(s.cfg, "run", dir=str(run_dir))  # not the curve's temporary one
    files.write_text(rundir.path(run_dir, rundir.CONFIG), config_mod.to_yaml(cfg))
    weights = save_weights(s.model, s.opts.ema, run_dir)
    log(f"learn: kept the final weights in {weights} (trmkit eval {run_dir} --data OTHER scores them)")


class Curve(Hooks):
    """The learning curve as hooks on the training loop: training time is counted on the curve's own clock
    (evaluations excluded); after the first step that brings it to or past each mark (at least one step
    per point, even when a step outlasts the interval), an evaluation, a Point. The steps end after the
    last mark's point, or at the first that reaches `target` (metric, value); only these end them
    (owns_end), not train.max_steps.

    schedule "budget": the lr schedule is fitted to the budget (marks_s[-1]) from the training time;
    "config" keeps the config's train.max_steps. keep: a folder that receives the final weights and config."""

    owns_end = True

    def __init__(self, marks_s: list[float], task_name: str, schedule: str = "budget", log: Log = print,
                 target: tuple[str, float] | None = None, keep: Path | None = None) -> None:
        self.marks_s, self.task_name, self.schedule = list(marks_s), task_name, schedule
        self.log, self.target, self.keep = log, target, keep
        self.points: list[Point] = []
        self.last_evals: dict | None = None  # the last point's evaluation, at step self.first
        self.clock, self.first, self.done = session.Clock(), 0, False  # started again by on_start
        self.fit: TimeFit | None = None

    def on_start(self, s: session.Session) -> None:
        at = ", ".join(f"{m / 60:g}" for m in self.marks_s)
        self.log(f"learn: {self.marks_s[-1] / 60:g} min of training, evaluated at {at} min on {len(s.data.test)} "
                 f"held-out {self.task_name} examples; evaluation time is not counted; load average "
                 f"{psutil.getloadavg()[0]:.2f} at start")
        self.fit = TimeFit(budget_s=self.marks_s[-1], start_s=0.0, model=s.cfg.model,
                           ends=depth.stage_ends(s.cfg.train.depth_curriculum),
                           counted="evaluation not counted") if self.schedule == "budget" else None
        self.clock, self.first = session.Clock(), s.state.step

    def on_step(self, s: session.Session, metrics: dict[str, float]) -> None:
        clock = self.clock
        clock.samples += s.cfg.train.batch_size
        due = self.fit.observe(s.state.step, clock.train_seconds(), s.cfg.train.max_steps) if self.fit else None
        if due is not None:  # the first step (compile) is not timed: observe starts the clock after it
            s.cfg = config_mod.replace(s.cfg, "train", max_steps=due[0])
            self.log(f"learn: schedule: {due[1]}")
        elif s.state.step == s.cfg.train.max_steps:
            self.log(f"learn: step {s.state.step} = train.max_steps: the lr schedule has ended, lr stays at "
                     f"{metrics['train/lr']:.3g} (train.max_steps=N stretches it)")
        if clock.train_seconds() >= self.marks_s[len(self.points)] and s.state.step != self.first:
            self.point(s, metrics["train/lr"])

    def point(self, s: session.Session, lr: float) -> None:
        """An evaluation at a mark; the last mark, or the target reached, ends the steps."""
        point, self.last_evals = evaluate_point(s, self.clock, lr)
        self.points.append(point)
        self.first = s.state.step
        self.log(format_point(point))
        self.done = len(self.points) == len(self.marks_s)
        if self.target is not None and point_value(point, self.target[0]) >= self.target[1]:
            self.log(f"learn: {self.target[0]} >= {self.target[1]:g} reached; training stops here (--target)")
            self.done = True

    def should_stop(self, s: session.Session) -> bool:
        return self.done

    def evaluation(self, s: session.Session) -> dict | None:
        return self.last_evals if self.points and self.first == s.state.step else None

    def after_training(self, s: session.Session, result: dict) -> None:
        if self.keep is not None:
            keep_run(s, self.keep, self.log)


def parse_target(text: str | None) -> tuple[str, float] | None:
    """--target METRIC=VALUE (e.g. exact_accuracy=0.825): the time to reach it is the curve's headline."""
    if text is None:
        return None
    key, _, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not key.strip() or number is None:
        raise ConfigError(f"--target {text}: write METRIC=VALUE, e.g. exact_accuracy=0.825 or "
                          "valid_path_accuracy=0.8")
    return key.strip(), number


ACCURACIES = ("exact_accuracy", "cell_accuracy", "blank_accuracy")


def point_value(p: Point, key: str) -> float:
    """A point's value of key: one of the generic accuracies or of the task scorer's metrics."""
    if key in ACCURACIES and getattr(p, key) is not None:
        return float(getattr(p, key))
    if key in p.task_metrics:
        return p.task_metrics[key]
    known = [k for k in ACCURACIES if getattr(p, k) is not None] + sorted(p.task_metrics)
    raise ConfigError(f"--target {key}=...: the curve has no {key}; use one of {', '.join(known)}")


def time_to_target(points: list[Point], target: tuple[str, float]) -> str:
    """The first point that reached the target (so --every sets the resolution), or the best one."""
    key, want = target
    for p in points:
        if point_value(p, key) >= want:
            return (f"time to {key} >= {want:g}: {p.minutes:.2f} min of training, step {p.steps} "
                    "(the first evaluation that reached it; --every sets the resolution)")
    best = max(points, key=lambda p: point_value(p, key))
    return (f"time to {key} >= {want:g}: not reached in {points[-1].minutes:.2f} min "
            f"(best {point_value(best, key):.3f} at {best.minutes:.2f} min, step {best.steps})")


def evaluate_point(s: session.Session, clock: session.Clock, lr: float) -> tuple[Point, dict]:
    """The held-out set scored on the weights in hand (EMA when on): (its Point, the evaluation's metrics)."""
    trained = clock.train_seconds()
    t0 = time.perf_counter()
    evals = evaluate.run_eval(s)
    seconds = time.perf_counter() - t0
    clock.eval_seconds += seconds
    return Point(minutes=trained / 60, steps=s.state.step, samples=clock.samples,
                 samples_started=s.state.samples_started,
                 blank_accuracy=evals["blank_accuracy"] if s.data.test.meta.blank_id is not None else None,
                 exact_accuracy=evals["exact_accuracy"], cell_accuracy=evals["cell_accuracy"],
                 loss=evals["loss"], act_steps=evals["act_steps"], lr=lr, eval_seconds=seconds,
                 wall_minutes=(time.perf_counter() - clock.start) / 60, load_average=psutil.getloadavg()[0],
                 task_metrics={k: float(v) for k, v in evals.items() if k not in GENERIC}), evals


GENERIC = ("loss", "cell_accuracy", "blank_accuracy", "exact_accuracy", "act_steps", "samples")


def _blank(p: Point) -> str:
    return "-" if p.blank_accuracy is None else f"{p.blank_accuracy:.3f}"


def format_point(p: Point) -> str:
    return (f"learn @ {p.minutes:.2f} min (step {p.steps}, {p.samples / max(p.minutes * 60, 1e-9):.0f} "
            f"samples/s): blank {_blank(p)}, exact {p.exact_accuracy:.3f}, cell {p.cell_accuracy:.3f}"
            + "".join(f", {k} {p.task_metrics[k]:.3f}" for k in _shown(p))
            + f" | eval {p.eval_seconds:.1f} s, load {p.load_average:.2f}")


def _shown(p: Point) -> list[str]:
    """The task's metrics a line or table shows: per-class or per-band ones ("a/b") stay in the JSON."""
    return [k for k in p.task_metrics if "/" not in k]


def format_table(points: list[Point]) -> list[str]:
    """The curve as a fixed-width table."""
    extra = _shown(points[0]) if points else []
    lines = ["minutes  steps   samples  blank_acc  exact_acc  cell_acc  eval_s  load"
             + "".join(f"  {k}" for k in extra),
             "-------  -----  --------  ---------  ---------  --------  ------  ----"
             + "".join(f"  {'-' * len(k)}" for k in extra)]
    for p in points:
        lines.append(f"{p.minutes:7.2f}  {p.steps:5d}  {p.samples:8d}  {_blank(p):>9}  "
                     f"{p.exact_accuracy:9.3f}  {p.cell_accuracy:8.3f}  {p.eval_seconds:6.1f}  "
                     f"{p.load_average:4.2f}" + "".join(f"  {p.task_metrics[k]:{len(k)}.3f}" for k in extra))
    lines.append("minutes = training time; evaluation (eval_s) is not counted in it")
    return lines


def to_json(points: list[Point]) -> list[dict[str, Any]]:
    return [asdict(p) for p in points]
