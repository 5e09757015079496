"""trmkit from Python: a few plain functions over the objects the CLI uses (the CLI reads argv
and calls these).

    import trmkit

    run = trmkit.fit("configs/sudoku-laptop.yaml", {"train.max_steps": 200, "run.dir": "runs/py"})
    run.summary["exact_accuracy"]                 # the final evaluation, as summary.json holds it
    trmkit.evaluate(run, steps=[4, 8])["steps"]   # more supervision steps at test time: a curve
    run = trmkit.load("runs/py")                  # a finished run directory, later
    trmkit.classify_mail("runs/email/bundle", "mail/")  # [{"label": ..., "probability": ...}, ...]

The functions that report progress take `log` (default: print) for what the CLI would print; errors are
`trmkit.config.ConfigError` (bad input, with the fix) as on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypedDict

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.config import Config, ConfigError
from trmkit.tasks.options import BuildOptions, read_options, specs

if TYPE_CHECKING:
    from trmkit.model.parts import PartsFactory
    from trmkit.tasks.base import BeforeTraining, SamplerFactory, ScorerFactory, Task

Log = Callable[[str], None]
DEFAULT_CONFIG = "configs/sudoku-laptop.yaml"


def cache_dir() -> Path:
    """Where measurements are cached (XDG_CACHE_HOME, else ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trmkit"


def as_overrides(overrides: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    """{"train.max_steps": 200, "run.compile": False} -> ["train.max_steps=200", "run.compile=false"]."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in overrides.items()]
    return list(overrides)


def minutes_overrides(minutes: float | None) -> list[str]:
    """`--minutes N`: train.max_minutes=N and train.fit_to_time=true (train/timefit.py)."""
    if minutes is None:
        return []
    if minutes <= 0:
        raise ConfigError(f"--minutes {minutes:g}: give a positive number of minutes")
    return [f"train.max_minutes={minutes:g}", "train.fit_to_time=true"]


@dataclass(frozen=True)
class Run:
    """A run directory written by `trmkit train` (or `fit` here)."""

    dir: Path
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # predict's loaded model

    @property
    def config(self) -> Config:
        return config_mod.load(rundir.path(self.dir, rundir.CONFIG), [f"run.dir={self.dir}"])

    @property
    def summary(self) -> dict:
        """summary.json: the final evaluation's metrics, speed and memory."""
        import json

        path = rundir.path(self.dir, rundir.SUMMARY)
        if not path.is_file():
            raise ConfigError(f"{path} not found: the run has not finished (`trmkit train --resume {self.dir}`)")
        return json.loads(path.read_text())

    def evaluate(self, **kwargs) -> dict:
        """`evaluate(self, ...)`: see `trmkit.evaluate`."""
        return evaluate(self, **kwargs)

    def predict(self, inputs: Sequence, *, steps: int | str | None = None, details: bool = False,
                log: Log = lambda m: print(m, file=sys.stderr)) -> list:
        """Answers of a Sudoku, maze or pairs run, each in its input's form (`trmkit predict`); the model is
        loaded on the first call and kept by this Run. `steps`: K or "auto[:CAP]" (default: auto for mazes,
        the trained N_sup else). With `details`, a dict per input: "output", "valid" (Sudoku's rules, a
        maze's route) or "correct" (a pairs input given with an output), and the "steps" it took.

        >>> run = trmkit.load("runs/sudoku-laptop")
        >>> run.predict(["4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4......"])
        ['417369825632158947958724316825437169791586432346912758289643571573291684164875293']
        >>> run.predict([[[4, 0, 0, 0, 0, 0, 8, 0, 5], ...]], details=True)[0]   # a 9 x 9 list: one back
        {'output': [[4, 1, 7, 3, 6, 9, 8, 2, 5], ...], 'valid': True, 'steps': 16}"""
        from trmkit.predict.command import answer_values

        return answer_values(self._predictor(log), list(inputs), steps, details, log)

    def _predictor(self, log: Log):
        """The run's model for predict, loaded once per Run (a frozen dataclass: kept in `_cache`)."""
        if "predictor" not in self._cache:
            from trmkit import hardware
            from trmkit.predict.engine import Predictor

            self._cache["predictor"] = Predictor.open(self.dir, None, hardware.probe(), log, cache_dir())
        return self._cache["predictor"]


def load(run_dir: str | Path) -> Run:
    """A finished run directory: `trmkit.load("runs/py").summary["exact_accuracy"]`."""
    run = Run(Path(run_dir))
    if not rundir.path(run.dir, rundir.CONFIG).is_file():
        raise ConfigError(f"{run.dir}: no {rundir.CONFIG} there; is it a run directory written by `trmkit train`?")
    return run


def fit(config: str | Path = DEFAULT_CONFIG, overrides: Mapping[str, Any] | Sequence[str] | None = None, *,
          minutes: float | None = None, resume: str | Path | bool | None = None, force: bool = False,
          log: Log = print) -> Run:
    """Plan, train and evaluate as `trmkit train CONFIG [k=v ...] [--minutes N] [--resume RUN] [--force]`;
    the run written.

    A run.dir that already holds a run is refused unless `resume` (a run directory, or True for the
    config's run.dir: continue it) or `force=True` (delete the old run's files, start afresh: what a
    notebook that retrains on every run passes). A run stopped by SIGINT or SIGTERM saves its checkpoint
    and raises KeyboardInterrupt saying how to resume. Named `fit`, not `train`: `trmkit.train` is the
    trainer's package.

    >>> run = trmkit.fit("configs/sudoku-laptop.yaml", {"train.max_steps": 100, "run.dir": "runs/a"}, force=True)
    >>> round(run.summary["cell_accuracy"], 2)
    0.78"""
    from trmkit.data.hints import MissingStore
    from trmkit.registry import SECTIONS
    from trmkit.train import distributed
    from trmkit.train.resume import load_for_run

    extra = as_overrides(overrides) + minutes_overrides(minutes)
    config = str(config) if config else None
    if resume is True:  # the run.dir the config and overrides name
        resume = load_for_run(config, extra, None, DEFAULT_CONFIG, SECTIONS).run.dir
    cfg = load_for_run(config, extra, str(resume) if resume else None, DEFAULT_CONFIG, SECTIONS)
    try:
        result = run_training(cfg, distributed.world_from_env({}), log, resume=bool(resume), force=force)
    except MissingStore as err:  # the preset's comments say how its own store is built
        raise err.for_config(config) from None
    if result.get("stopped"):
        raise KeyboardInterrupt(f"training stopped by {result['stopped']} at step {result['steps']}, its checkpoint "
                                f"saved: continue with trmkit.fit(resume={str(cfg.run.dir)!r})")
    return Run(Path(cfg.run.dir))


def run_training(cfg: Config, world, log: Log = print, is_tty: bool = False, resume: bool = False,
                 force: bool = False) -> dict:
    """The one trainer on a loaded config (`world`: this process's place in a torchrun job): `resume`
    continues the run in run.dir, `force` starts afresh there (train/resume.py `claim_run_dir`); the
    store's task plugs in its scorer, generator and before-training hook (train/run.py `run`)."""
    from trmkit import hardware
    from trmkit.train.run import run

    return run(cfg, hardware.probe(), log=log, cache_dir=cache_dir(), world=world, resume=resume, force=force,
               is_tty=is_tty, **task_hooks(cfg, log))


def evaluate(run: Run | str | Path, data: str | Path | None = None, *, steps: Iterable[int] | str | None = None,
             vote: Iterable[int] | str | None = None, pool: str | None = None, checkpoint: int | None = None,
             limit: int | None = None, overrides: Mapping[str, Any] | Sequence[str] | None = None,
             select: int | None = None, select_from: str = "noise", checker: str | None = None,
             verbose: bool = False, log: Log = lambda m: print(m, file=sys.stderr)) -> dict:
    """`trmkit eval RUN [--data D] [--steps K,..|auto[:CAP]] [--vote N,..] [--select N] [--checker [SPEC]]` as a
    dict (the JSON the CLI prints).

    >>> trmkit.evaluate("runs/a", steps=[4, 8])["steps"]["8"]["exact_accuracy"]
    >>> trmkit.evaluate("runs/a", steps="auto:64")["steps_used_mean"]
    >>> trmkit.evaluate("runs/a", steps=[16], select=8)["select/exact_accuracy"]  # beside the one-shot figure
    >>> trmkit.evaluate("runs/l6", checker="examples/latin_checker.py:is_latin_square")["checker_one_shot"]
    checker: also the share of the test problems whose one-shot answer it accepts (adapt/checked.py): "" for
    the task's own rules (Sudoku, maze), "file.py:function" on a pairs store. verbose: also log the plan's
    choices (threads, dtype, batch, ...), as `trmkit train` always does."""
    from trmkit import hardware, plan
    from trmkit.adapt.checked import checker_one_shot
    from trmkit.train import evaluate as evaluate_mod
    from trmkit.train import testtime
    from trmkit.train.resume import check_evaluable
    from trmkit.train.session import prepare

    run_dir = check_evaluable(load(run.dir if isinstance(run, Run) else run).dir, "eval")  # not an RL run
    extra = [f"run.dir={run_dir}"] + ([f"data.path={data}"] if data else []) + as_overrides(overrides)
    cfg = config_mod.load(rundir.path(run_dir, rundir.CONFIG), extra)
    counts, auto, step_list, n_select = _eval_arguments(run_dir, steps, vote, pool, checkpoint, select, select_from)
    # The vote's variants from the test split's meta.json: a count the task cannot run (a maze has 8
    # symmetries) is refused before the session and the model load (~3 s); without a readable test
    # split, prepare says what is wrong with the store.
    meta = _test_meta(cfg)
    variants = _variants(cfg, meta, max(counts), log) if counts and meta else None
    checking = _checking(meta, checker) if checker is not None and meta else None  # a bad one: refused now
    session = prepare(cfg, hardware.probe(), log=plan.plan_lines_to(log, verbose), cache_dir=cache_dir(),
                      evaluate_only=True, **task_hooks(cfg, log))
    evaluate_mod.load_weights(session, run_dir, checkpoint)
    if counts and variants is None:  # the store has no test split: refused with the reason
        variants = _variants(cfg, _split_meta(session), max(counts), log)
    with session.run.meter.phase("eval"):
        if auto is not None:
            result = testtime.eval_auto(session, auto, limit, log=log)
        else:
            result = testtime.eval_at_steps(session, step_list, limit, log=log, variants=variants, counts=counts,
                                            keep=checkpoint is None, pool=testtime.pool_steps(pool, step_list))
        if n_select and result:
            result.update(_select(cfg, session, n_select, select_from, step_list, limit, log))
        if checking is not None and result:  # at the first K of --steps (the trained N_sup), or until stable
            result.update(checker_one_shot(session, checking, next(iter(step_list), None), auto, limit, log))
    if not result:
        raise ConfigError(f"{cfg.data.path}: no test split to evaluate")
    return _with_memory(result, session, checkpoint, log)


def _with_memory(result: dict, session, checkpoint: int | None, log: Log) -> dict:
    """The evaluation's result with the weights it read and the whole process's memory (peak RSS, budget)."""
    from trmkit.train.finish import memory_summary

    memory = memory_summary(session, log=log)
    result["weights"] = f"checkpoint step {checkpoint}" if checkpoint is not None else "final"
    result["peak_rss_gb"] = memory["phases"]["process"]["peak_gb"]
    result["memory_budget_gb"] = round(int(session.run.plan.budget.value) / 2**30, 3)
    result["memory"] = memory
    return result


def _checking(meta, spec: str):
    """`--checker`'s Checking for the test split's task ("": its own rules), made before the model loads: a task
    that takes no user function, a missing file or one that does not load is refused at once."""
    from trmkit import registry
    from trmkit.tasks.base import checker_for

    try:
        task = registry.get(meta.task)
    except KeyError as e:  # registry.get's message lists the known tasks
        raise ConfigError(f"--checker: {e.args[0]}, so it has no checker (docs/tasks.md, Checkers)") from None
    return checker_for(task, meta, spec or None)


def _eval_arguments(run_dir: Path, steps, vote, pool: str | None, checkpoint: int | None, select: int | None,
                    select_from: str) -> tuple[list[int], int | None, list[int], int]:
    """(vote counts, --steps auto's cap or None, the K list, --select's N) from `evaluate`'s arguments, each
    refused at once when it cannot run: before the session and the model load, not after them."""
    from trmkit.train import evaluate as evaluate_mod
    from trmkit.train import halting
    from trmkit.train import select as select_mod
    from trmkit.train import testtime

    counts = testtime.parse_counts(_listed(vote))
    auto = halting.parse_auto(_listed(steps))  # `--steps auto[:cap]`; None: a list of K
    if auto is not None and (counts or pool):
        raise ConfigError("--steps auto evaluates one-shot: --vote and --pool need a list of K (--steps 16,32)")
    step_list = testtime.parse_steps(_listed(steps)) if auto is None else []
    testtime.check_pool(pool, counts, step_list)
    if checkpoint is not None:
        evaluate_mod.checkpoint_path(run_dir, checkpoint)  # a step not kept is refused before the model loads
    n_select = select_mod.parse_select(select)
    _check_select(n_select, select_from, auto, step_list)
    return counts, auto, step_list, n_select


def _check_select(n: int, source: str, auto: int | None, step_list: list[int]) -> None:
    """`--select` runs every trajectory at one K: refused with --steps auto or a list of several K."""
    from trmkit.train import select as select_mod

    if n and auto is not None:
        raise ConfigError("--select runs every trajectory for a fixed K: give --steps K (or none: the trained "
                          "N_sup), not --steps auto")
    if n and len(step_list) > 1:
        raise ConfigError(f"--select runs every trajectory at one K: give one --steps K, not {len(step_list)}")
    if n:
        select_mod.plan(1, source)  # an unknown --select-from is refused before the model loads


def _select(cfg: Config, session, n: int, source: str, step_list: list[int], limit: int | None, log: Log) -> dict:
    """The `--select n` figures (train/select.py) at the one K of --steps (or the trained N_sup)."""
    from trmkit.train import select as select_mod

    k = step_list[0] if step_list else session.model.cfg.halt_max_steps
    variants = _select_variants(cfg, session, n, source, log) if source != "noise" else None
    trajectories = select_mod.plan(n, source, len(variants) if variants is not None else 1)
    noise = "no noise" if source == "variants" else (f"noise of std {select_mod.NOISE_STD} on the initial carry of "
                                                     f"trajectories 1..{n - 1} (seed {select_mod.NOISE_SEED})")
    log(f"eval: --select {n} from {source} at K={k}: {noise}; the answer kept: {select_mod.RULE}; fixed choices, "
        "not tuned (train/select.py)")
    return select_mod.run_select(session, trajectories, k, variants, limit, log)


def _select_variants(cfg: Config, session, n: int, source: str, log: Log):
    """The task's variants for `--select-from variants|both`: n of them, or for `both` the most of n, n/2,
    n/4, ... the task makes (a maze has 8 symmetries), with the reason logged."""
    count = n
    while True:
        try:
            variants = _variants(cfg, _split_meta(session), count, log)
        except ConfigError:
            if source != "both" or count == 1 or session.data.test is None:
                raise
            count //= 2
            continue
        if count < n:
            log(f"eval: --select {n} from both: {count} variants (the most of {n}, {n}/2, ... the task makes), "
                f"trajectory t solves variant t mod {count}")
        return variants


def _listed(values: Iterable[int] | str | None) -> str | None:
    """[4, 8] -> "4,8" (the CLI's form); a string or None as it is."""
    if values is None or isinstance(values, str):
        return values
    return ",".join(str(int(v)) for v in values)


def _variants(cfg: Config, meta, count: int, log: Log):
    """The store's task's symmetries to vote over (`--vote`), for the test split's StoreMeta (None: none)."""
    task = store_task(cfg, log)
    if task is None or task.variants is None or meta is None:
        raise ConfigError(f"--vote: the task of {cfg.data.path} declares no symmetries to vote over "
                          "(Maze and Sudoku do); evaluate without --vote")
    try:
        return task.variants(meta, count)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def _split_meta(session):
    """The StoreMeta of the session's test split; None without one."""
    return session.data.test.meta if session.data.test is not None else None


def _test_meta(cfg: Config):
    """The StoreMeta of the store's test split; None when it cannot be read."""
    from trmkit.data.store import META_FILE, StoreError, read_meta

    try:
        return read_meta(Path(cfg.data.path) / "test" / META_FILE)
    except StoreError:
        return None


def store_task(cfg: Config, log: Log = print) -> Task | None:
    """The task that built the run's store (None: an unknown task, generic metrics only)."""
    from trmkit import registry
    from trmkit.data.store import META_FILE, StoreError, read_meta

    root = Path(cfg.data.path)
    for split in ("train", "test"):
        try:
            name = read_meta(root / split / META_FILE).task
        except StoreError:
            continue
        try:
            return registry.get(name)
        except KeyError:
            log(f"task: {name!r} is not a registered task; evaluation reports the generic metrics only")
            return None
    return None


class TaskHooks(TypedDict):
    """What a store's task hands the trainer (keyword arguments of the trainer's entry)."""

    scorer: ScorerFactory | None
    sampler: SamplerFactory | None
    before_training: BeforeTraining | None
    parts: PartsFactory | None


def check_sections(cfg: Config, task: Task) -> None:
    """A task's store trains with its own config sections only: a section another task or application reads,
    set away from its defaults (e-mail's `email.input_linear: true` on a Sudoku store), would be ignored in
    silence, so it is refused by its first changed key."""
    for name, section in cfg.sections.items():
        if name in task.sections or not dataclasses.is_dataclass(section):
            continue
        changed = [f.name for f in dataclasses.fields(section)
                   if getattr(section, f.name) != getattr(type(section)(), f.name)]
        if changed:
            key = changed[0]
            raise ConfigError(f"{name}.{key}={getattr(section, key)!r}: the {name!r} section is not read by this "
                              f"store's task ({task.name}), so it would be ignored; remove it from the config "
                              "(or train on a store of the task that reads it)")


def task_hooks(cfg: Config, log: Log = print) -> TaskHooks:
    """What the store's task plugs into the trainer: its scorer, its generator, its before-training hook and
    its pieces of the model."""
    task = store_task(cfg, log)
    if task is not None:
        check_sections(cfg, task)
    return TaskHooks(scorer=task.scorer if task else None, sampler=task.sampler if task else None,
                     before_training=task.before_training if task else None,
                     parts=task.model_parts if task else None)


def add_data_arguments(p: argparse.ArgumentParser, task: Task) -> None:
    """The flags of `trmkit data NAME`: one per field of the task's options (tasks/options.py), common ones first."""
    for spec in specs(task.options):
        kw: dict[str, Any] = {"dest": spec.name, "help": spec.help}
        if spec.kind is bool:
            kw["action"] = argparse.BooleanOptionalAction if spec.optional else "store_true"
        else:
            kw.update(type=spec.kind, action="append" if spec.many else "store")
            kw.update({"choices": spec.choices} if spec.choices else {})
            kw.update({"metavar": spec.metavar} if spec.metavar else {})
        kw.update({"required": True} if spec.required else {"default": spec.default})
        p.add_argument(spec.flag, **kw)


def data_options(task: Task, args: argparse.Namespace) -> BuildOptions:
    """The task's options from the parsed `trmkit data NAME` flags (the CLI's half of build_data)."""
    return read_options(task.options, {s.name: getattr(args, s.name) for s in specs(task.options)},
                        f"trmkit data {task.name}")


def build_data(task: str, out: str | Path, log: Log = print, **options: Any) -> Path:
    """`trmkit data TASK --out OUT --option value ...` from Python; the store's folder. The options are the
    task's (`trmkit data TASK --help`: --min-guesses is min_guesses); an option given several times takes a
    list. A store already at `out` is replaced only with force=True (`--force`).

    >>> trmkit.build_data("sudoku", "data/easy", source="generate", num=200, givens="34-40", aug=2, force=True)
    PosixPath('data/easy')"""
    from trmkit import registry

    for problem in registry.load_plugins():  # third-party tasks (entry points "trmkit.tasks")
        log(f"trmkit: {problem}")
    try:
        spec = registry.get(task)
    except KeyError as err:
        raise ConfigError(str(err.args[0])) from err
    where = f"build_data({task!r}) (see `trmkit data {task} --help`)"
    build_store(spec, read_options(spec.options, {"out": out, **options}, where), log)
    return Path(out)


def build_store(task: Task, options: BuildOptions, log: Log = print) -> None:
    """Run a task's builder on its options, after checking that the store would not be written over (or into)
    its own source, nor over an existing store without --force.

    A builder says what is wrong with its options or its source by raising a ValueError with the fix in its
    message (a ConfigError is one): that becomes a ConfigError, one line at the CLI. A missing or unreadable
    source file is an OSError, which keeps its type: the CLI's top level (errors.py) names the file in one line."""
    from trmkit.data.store import check_new_store, is_store_dir
    from trmkit.files import check_output

    source = getattr(options, "source", None)
    sources = list(source) if isinstance(source, tuple) else [source] if source else []
    try:
        if any(Path(s).exists() for s in sources):
            check_output(options.out, [s for s in sources if Path(s).exists()])
        check_new_store(options.out, force=options.force)
    except (ValueError, OSError) as err:  # FileExistsError, UnsafeTargetError: the refusals, with their fix
        raise ConfigError(str(err)) from err
    if options.force and is_store_dir(Path(options.out)):
        log(f"data: --force -> the store at {options.out} is replaced once the new one is written")
    try:
        task.build(options, log)
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(str(err)) from err


def classify_mail(model: str | Path, *inputs: str | Path, threshold: float | Mapping[str, float] | None = None,
                  batch: int = 256, log: Log = lambda m: print(m, file=sys.stderr)) -> list[dict]:
    """Classify every message of the inputs (an .eml file or folder, a Maildir, an mbox, a CSV or
    JSONL) with a bundle or an e-mail run: one dict per message, as `trmkit email predict` prints.

    >>> [p["label"] for p in trmkit.classify_mail("runs/email/bundle", "mail/inbox.mbox")]
    ['spam', 'easy-ham', ...]"""
    from trmkit.data.imports import ImportReport
    from trmkit.email.bundle import Classifier
    from trmkit.email.stream import predict_stream
    from trmkit.email.commands import input_messages

    clf = Classifier.load(model, batch_size=batch)
    if threshold is not None:
        clf.thresholds = dict(threshold) if isinstance(threshold, Mapping) else {"*": float(threshold)}
    report = ImportReport(source=", ".join(map(str, inputs)), unit="messages")
    sources = [str(Path(i).expanduser()) for i in inputs]
    results = list(predict_stream(clf, input_messages(sources, "auto", report), batch))
    for line in report.summary_lines():
        log(line)
    return results
