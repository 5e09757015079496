"""`trmkit adapt RUN --data NEW`: learn a new source from a checker (docs/adapt.md).

The command reads the original run's config, records the new source in an `adapt:` section, starts a new
run from RUN's weights (train.init_from; RUN is never changed) and hands the trainer (train/run.py `run`,
the one way in) two things: the rounds as hooks (adapt/rounds.py) and a stream that mixes the kept answers
with the original training set (adapt/stream.py). `trmkit adapt --resume RUN2` continues an adaptation
from its newest checkpoint exactly. The registry and the API sit above this package; the CLI hands in what
it needs of them (`Plugins`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.adapt.config import SECTION, AdaptConfig, adapt_config, describe_arm, without_adapt
from trmkit.adapt.problems import Problems, check_fits, first_meta, read_problems, size_change, split_problems
from trmkit.adapt.rounds import Rounds, Source
from trmkit.adapt.stream import InGrid, MixedStream, Reblank, batch_size_for
from trmkit.adapt.trrpg import TrRpg
from trmkit.config import Config, ConfigError, ModelConfig
from trmkit.data.store import StoreMeta
from trmkit.tasks.base import Task, checker_for
from trmkit.train import halting
from trmkit.train.resume import describe_run, holds_run

Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Plugins:
    """What the CLI hands in from the layers above: the task registry's lookup and config sections, and the
    API's task hooks (scorer, generator, before-training, model parts) for a config."""

    get_task: Callable[[str], Task]
    sections: Mapping[str, type]
    task_hooks: Callable[..., dict]


def run(args: argparse.Namespace, cache_dir: Path, plugins: Plugins) -> int:
    """The command: a fresh adaptation or a resumed one; the exit code."""
    if args.resume:
        given = [f"--{k}" for k in ("minutes", "out", "checker", "heldout", "objective", "keep")
                 if getattr(args, k) is not None]
        given += (["RUN"] if args.run_dir else []) + (["--data"] if args.data else [])
        if given:
            raise ConfigError(f"--resume {args.resume} continues that adaptation with its own settings: drop "
                              f"{', '.join(given)} (a setting can change as an override, e.g. adapt.round_steps=100)")
        cfg = _resumed_config(Path(args.resume), list(args.overrides), plugins)
    else:
        if not args.run_dir or not args.data:
            raise ConfigError("give the run to start from and the new source: trmkit adapt RUN --data NEW "
                              "(or --resume RUN2)")
        cfg = new_config(Path(args.run_dir), Path(args.data), plugins, overrides=list(args.overrides),
                         out=args.out, minutes=args.minutes, checker=args.checker, heldout=args.heldout,
                         objective=args.objective, keep=args.keep)
    result = adapt(cfg, plugins, cache_dir=cache_dir, resume=bool(args.resume), force=args.force,
                   is_tty=sys.stdout.isatty())
    return int(result.get("exit_code", 0))


def new_config(run_dir: Path, data: Path, plugins: Plugins, overrides: list[str] | None = None,
               out: str | None = None, minutes: float | None = None, checker: str | None = None,
               heldout: float | None = None, objective: str | None = None, keep: str | None = None,
               log: Log = print) -> Config:
    """The new run's config: RUN's, with run.dir=out, train.init_from=RUN, the adapt section and the steps."""
    if not rundir.weights_file(run_dir).is_file():
        raise ConfigError(f"{run_dir}: no finished run there ({rundir.weights_file(run_dir)} missing): adapt starts "
                          "from a trained run's weights; let it finish (`trmkit train --resume`) or name another")
    out_dir = Path(out) if out else run_dir.with_name(run_dir.name + "-adapted")
    if out_dir.resolve() == run_dir.resolve():
        raise ConfigError(f"--out {out_dir}: that is RUN itself, which adapt never changes: give another folder")
    if not out:
        log(f"adapt: --out {out_dir} (the default: RUN-adapted)")
    mine = [f"{SECTION}.source={data.resolve()}", f"{SECTION}.base_run={run_dir.resolve()}"]
    checker = _absolute_checker(checker)
    mine += [f"{SECTION}.{k}={v}" for k, v in (("checker", checker), ("heldout", heldout), ("objective", objective),
                                                       ("keep", keep)) if v is not None]
    extra = list(overrides or [])
    if not _given(extra, "train.restore_best", "train.early_stop_evals"):
        extra = ["train.restore_best=false", "train.early_stop_evals=0", *extra]  # they would judge by the old source
    steps = [] if _given(extra, "train.max_steps") else ["train.max_steps=1"]  # set below
    timed = ([f"train.max_minutes={minutes:g}", "train.fit_to_time=true"] if minutes is not None
             else ["train.max_minutes=0", "train.fit_to_time=false"])
    if minutes is not None and minutes <= 0:
        raise ConfigError(f"--minutes {minutes:g}: give a positive number of minutes")
    cfg = config_mod.load(rundir.path(run_dir, rundir.CONFIG),
                          [f"run.dir={out_dir}", f"train.init_from={run_dir.resolve()}", *steps, *timed, *mine, *extra],
                          dict(plugins.sections))
    acfg = adapt_config(cfg)
    cfg = _without_schedules(cfg, extra, log)
    cfg = _last_rate(cfg, acfg.objective, run_dir, extra, log)
    cfg = _embedding_rate(cfg, run_dir, extra, plugins, log)
    if steps:
        cfg = config_mod.replace(cfg, "train", max_steps=acfg.rounds * acfg.round_steps)
        log(f"adapt: train.max_steps={cfg.train.max_steps} (adapt.rounds={acfg.rounds} x adapt.round_steps="
            f"{acfg.round_steps}" + (f"; --minutes {minutes:g} fits it to the time)" if minutes else ")"))
    return cfg


def _without_schedules(cfg: Config, overrides: list[str], log: Log) -> Config:
    """cfg without RUN's schedules for training from scratch, unless set again in overrides (each printed): a
    depth curriculum would start the adaptation at a shallower recursion than RUN was trained to reach, and a
    curriculum stream or a generator's ramp would replay RUN's easiest samples first, over the adaptation's
    own steps."""
    if cfg.train.depth_curriculum and not _given(overrides, "train.depth_curriculum"):
        log(f"adapt: train.depth_curriculum={cfg.train.depth_curriculum!r} -> '' (RUN's depth from the first step: "
            "a depth curriculum is for training from scratch)")
        cfg = config_mod.replace(cfg, "train", depth_curriculum="")
    if cfg.data.stream == "curriculum" and not _given(overrides, "data.stream"):
        log("adapt: data.stream=curriculum -> store (the replay draws from all of RUN's training split: a "
            "curriculum would start again from its easiest samples)")
        cfg = config_mod.replace(cfg, "data", stream="store", curriculum_samples=0)
    ramp = cfg.data.stream == "generate" and cfg.data.curriculum_samples
    if ramp and not _given(overrides, "data.curriculum_samples"):
        log(f"adapt: data.curriculum_samples={cfg.data.curriculum_samples} -> 0 (the replay is generated at RUN's "
            "full difficulty from the first sample: a ramp would start again from its easiest)")
        cfg = config_mod.replace(cfg, "data", curriculum_samples=0)
    return cfg


def _last_rate(cfg: Config, objective: str, run_dir: Path, overrides: list[str], log: Log) -> Config:
    """cfg with train.lr, unless the user set it: RUN's configured (peak) rate for training on kept answers,
    RUN's rate at its last logged step for TR-RPG (each printed with its reason). Measured on the laptop Sudoku
    (docs/adapt.md): pseudo-labels at the peak 2e-3 reached 0.740 one-shot against 0.696 at the last rate 2e-4
    (paired +0.044, SE 0.024; old skill 0.902 against 0.914), while TR-RPG at the peak fell to 0.452 from 0.566."""
    if _given(overrides, "train.lr"):
        return cfg
    if objective != "tr-rpg":
        log(f"adapt: train.lr={cfg.train.lr:g} (RUN's configured rate; training on kept answers did as well there as "
            "at RUN's last rate, docs/adapt.md; set train.lr to choose)")
        return cfg
    from trmkit.monitor.loggers import read_metrics

    path = rundir.path(run_dir, rundir.METRICS)
    rates = [(r["step"], r["train/lr"]) for r in (read_metrics(path) if path.is_file() else []) if "train/lr" in r]
    if not rates or rates[-1][1] >= cfg.train.lr:
        log(f"adapt: train.lr={cfg.train.lr:g} (RUN's configured rate: "
            + (f"{path} logs no rate to continue from)" if not rates else "its last logged rate was no lower)"))
        return cfg
    step, rate = rates[-1]
    log(f"adapt: train.lr={cfg.train.lr:g} -> {rate:.3g} (tr-rpg: RUN's rate at its last logged step, {step}; its peak "
        "wrecked the policy in the measured runs, docs/adapt.md; set train.lr to choose)")
    return config_mod.replace(cfg, "train", lr=float(f"{rate:.3g}"))


def _embedding_rate(cfg: Config, run_dir: Path, overrides: list[str], plugins: Plugins, log: Log) -> Config:
    """cfg with train.puzzle_emb_lr scaled as train.lr was scaled from RUN's (by the user or `_last_rate`;
    printed), unless set too.

    The puzzle embedding has its own sign-SGD rate, which train.lr does not move: a user who lowers train.lr
    to adapt gently would otherwise step the embedding shared by every puzzle at RUN's full rate (a noisy
    gradient, such as TR-RPG's, then walks it away from what the rest of the weights expect)."""
    if _given(overrides, "train.puzzle_emb_lr") or cfg.model.puzzle_emb_len == 0:
        return cfg
    was = config_mod.load(rundir.path(run_dir, rundir.CONFIG), [], dict(plugins.sections)).train
    if was.lr <= 0 or cfg.train.lr == was.lr:
        return cfg
    rate = was.puzzle_emb_lr * cfg.train.lr / was.lr
    log(f"adapt: train.puzzle_emb_lr={was.puzzle_emb_lr:g} -> {rate:g} (train.lr {was.lr:g} -> {cfg.train.lr:g}: the "
        "puzzle embedding's rate follows in the same ratio; set train.puzzle_emb_lr to choose it)")
    return config_mod.replace(cfg, "train", puzzle_emb_lr=rate)


def _given(overrides: list[str], *keys: str) -> bool:
    """Whether the user set any of these dotted keys in the KEY=VALUE overrides."""
    return any(o.startswith(tuple(f"{k}=" for k in keys)) for o in overrides)


def _absolute_checker(spec: str | None) -> str | None:
    """FILE.py:FUNCTION with FILE made absolute, so that a resume from another directory finds it."""
    if not spec or ":" not in spec:
        return spec
    file, function = spec.rsplit(":", 1)
    return f"{Path(file).expanduser().resolve()}:{function}"


def _resumed_config(run_dir: Path, overrides: list[str], plugins: Plugins) -> Config:
    if not rundir.path(run_dir, rundir.CONFIG).is_file():
        raise ConfigError(f"--resume {run_dir}: no {rundir.CONFIG} there; is it a run directory of `trmkit adapt`?")
    cfg = config_mod.load(rundir.path(run_dir, rundir.CONFIG), overrides + [f"run.dir={run_dir}"],
                          dict(plugins.sections))
    if not adapt_config(cfg).source:
        raise ConfigError(f"--resume {run_dir}: its config has no adapt section, so it is not an adaptation: "
                          "continue it with `trmkit train --resume`")
    return cfg


def adapt(cfg: Config, plugins: Plugins, cache_dir: Path | None = None, resume: bool = False, force: bool = False,
          is_tty: bool = False, log: Log = print) -> dict:
    """Run the adaptation the config describes (a new run, or `resume` the one in run.dir); its result."""
    from trmkit import hardware
    from trmkit.train.run import run as train_run

    acfg = adapt_config(cfg)
    if not resume and not force and holds_run(cfg.run.dir):
        raise ConfigError(f"--out {cfg.run.dir} already holds a run ({describe_run(cfg.run.dir)}): continue an "
                          f"adaptation there with `trmkit adapt --resume {cfg.run.dir}`, give another --out, or add "
                          "--force to start afresh there (its checkpoints, weights, summary and metrics deleted)")
    problems = read_problems(acfg.source)
    base = config_mod.load(rundir.path(Path(acfg.base_run), rundir.CONFIG), [], dict(plugins.sections))
    cfg, batch_meta = _check_source(cfg, base.model, problems, resume, base.train.batch_size, log)
    task = plugins.get_task(problems.meta.task)
    source = _source(acfg, problems, task, log)
    aug = _variants(task, problems, acfg.augment, log) if acfg.augment > 1 else None
    if acfg.objective == "pseudo":  # tr-rpg says its own terms (adapt/trrpg.py); continue keeps nothing
        log(f"adapt: kept answers train under {len(aug) if aug else 1} symmetric variant(s) of the task; "
            f"{acfg.replay_share:.0%} of the samples replay the original training set (adapt.replay_share)")
    trace = cfg.model.halt_max_steps if cfg.data.trace else 0
    trace_of = _trace_of(source.checking, cfg.data.trace, trace)
    reblank = _reblank(problems, source.adapt, acfg.source, cfg.data.path, log) if acfg.reblank else None

    def wrap(base) -> MixedStream:
        return MixedStream(base, problems.inputs, problems.puzzle_ids, acfg.replay_share, cfg.run.seed, aug, trace,
                           trace_of, reblank)

    hooks = plugins.task_hooks(without_adapt(cfg), log)
    if batch_meta is not None and hooks.get("sampler") is not None:  # the run's own mazes in the new grid
        hooks["sampler"] = InGrid(hooks["sampler"], batch_meta.grid_shape[0], base.model.halt_max_steps)
        if cfg.model.halt_max_steps > base.model.halt_max_steps:
            log(f"adapt: the replayed samples are labelled for the run's own {base.model.halt_max_steps} steps and "
                f"then halt (not {cfg.model.halt_max_steps}: the run never trained a small maze past its N_sup, "
                "and training those steps wore the skill down; adapt/stream.py RunSteps)")
    objective = (TrRpg(cfg, acfg, source, hooks.get("sampler"), hooks.get("scorer"), log)
                 if acfg.objective == "tr-rpg" else None)  # the loss swapped through the trainer's objective seam
    try:
        return train_run(cfg, hardware.probe(), hooks=Rounds(acfg, source, log), log=log, cache_dir=cache_dir,
                         resume=resume, force=force, is_tty=is_tty, wrap_stream=wrap, objective=objective,
                         batch_meta=batch_meta, **hooks)
    finally:
        if objective is not None:
            objective.close()


def _reblank(problems: Problems, adapt_idx: Any, source: str, store: str, log: Log) -> Reblank:
    """adapt.reblank's blank token (the new source's store's, else RUN's store's) and the adapt part's blank
    counts."""
    blank = problems.meta.blank_id
    where = f"--data {source}"
    if blank is None:
        run_meta = first_meta(store)
        blank = run_meta.blank_id if run_meta is not None else None
        where = f"RUN's store {store}"
    if blank is None:
        raise ConfigError("adapt.reblank=true blanks more givens of a kept answer, and neither the new source's store "
                          "nor RUN's names a blank token: build one with its blank (`trmkit data pairs --blank "
                          "SYMBOL`), or leave adapt.reblank=false")
    made = Reblank.of(problems.inputs[adapt_idx], blank, problems.meta.pad_id)
    counts = made.counts
    log(f"adapt: reblank: a kept completion answer trains with givens blanked up to a blank count drawn from the "
        f"{len(counts)} problems to adapt on (median {int(np.median(counts))}, most {int(counts.max())}; blank "
        f"token {problems.meta.vocab[blank]!r}, from {where})")
    return made


def _trace_of(checking: Any, speed: int, steps: int) -> Callable[[Any, Any], Any] | None:
    """A trace run's (data.trace) kept answer -> its labels per supervision step (Checking.to_trace), if the
    checker derives them; None otherwise (the stream labels the last step alone)."""
    if not speed or checking.to_trace is None:
        return None
    return lambda x, y: checking.to_trace(x[None], y[None], speed, steps)[0]


def trace_steps(cfg: Config, n_sup: int, log: Log) -> Config:
    """A trace run adapting to a larger grid trains its kept paths step by step until their trace is complete,
    which a longer route reaches after more supervision steps than the run's N_sup: model.halt_max_steps
    becomes the cap of adapt.steps (auto:CAP, within which the tries found the answers; plain auto: its
    default cap, made explicit), unless an override set it. Printed with the reason."""
    acfg = adapt_config(cfg)
    if not cfg.data.trace or cfg.model.halt_max_steps != n_sup:
        return cfg
    cap = halting.parse_auto(acfg.steps)
    k = int(acfg.steps) if cap is None else (cap or halting.CAP_PER_N_SUP * n_sup)
    if k <= n_sup:
        return cfg
    log(f"adapt: model.halt_max_steps={k} (the run's {n_sup}): a kept path trains on its trace step by step "
        f"until the trace is complete, and a route on the larger grid needs more steps than {n_sup}; {k} is the "
        f"cap of adapt.steps={acfg.steps}, within which the tries find the answers (the samples still halt when "
        "the halting head says so)")
    log(f"adapt: train.stagger_start=true: the {cfg.train.batch_size} slots' first samples end {k} / "
        f"{cfg.train.batch_size} steps apart, or every slot would run the same step of its trace at once for "
        f"{k} steps (train/step.py stagger)")
    cfg = config_mod.replace(cfg, "train", stagger_start=True)
    cfg = config_mod.replace(cfg, "model", halt_max_steps=k)
    return config_mod.with_section(cfg, SECTION, dataclasses.replace(acfg, steps=f"auto:{k}") if cap is not None
                                   else acfg)


def _check_source(cfg: Config, model: ModelConfig, problems: Problems, resume: bool, batch: int, log: Log
                  ) -> tuple[Config, StoreMeta | None]:
    """The new source fits the run (`model`, `batch`: RUN's), and is the one the adaptation began on; its
    fingerprint recorded. A larger grid (size_change): its meta, and a fresh adaptation's batch size for it."""
    acfg = adapt_config(cfg)
    base = Path(acfg.base_run)
    vocab = json.loads(rundir.path(base, rundir.DATA_META).read_text(encoding="utf-8")).get("vocab", [])
    check_fits(problems, vocab, model.num_puzzle_ids, acfg.source)
    sized = size_change(problems, model, cfg.data.stream, acfg.source)
    if sized is not None:
        log(f"adapt: the new source's {' x '.join(map(str, sized.grid_shape))} grid is larger than the run's "
            f"{model.grid_height} x {model.grid_width}: the conv model (no positions) trains on it, the replayed "
            "samples are the run's own mazes placed in that grid, the run's held-out split is evaluated at its size")
    if sized is not None and not resume and cfg.train.batch_size == batch:  # not set in the overrides
        wide = dataclasses.replace(model, seq_len=sized.seq_len, grid_height=sized.grid_shape[0],
                                   grid_width=sized.grid_shape[1])
        cfg = config_mod.replace(cfg, "train", batch_size=batch_size_for(model, wide, batch, log))
    if sized is not None and not resume:
        cfg = trace_steps(cfg, model.halt_max_steps, log)
    if rundir.task_of(base) not in (None, problems.meta.task):
        raise ConfigError(f"--data {acfg.source}: a {problems.meta.task} store, the run {base} learned "
                          f"{rundir.task_of(base)}: build the new source with the run's task")
    fingerprint = json.dumps(problems.fingerprints, sort_keys=True)
    if resume and acfg.source_fingerprint and acfg.source_fingerprint != fingerprint:
        raise ConfigError(f"{acfg.source}: the new source changed since the adaptation began (its fingerprints "
                          "differ): resume only on the same store, or start a new adaptation (--force)")
    return config_mod.with_section(cfg, SECTION, dataclasses.replace(acfg, source_fingerprint=fingerprint)), sized


def _source(acfg: AdaptConfig, problems: Problems, task: Task, log: Log) -> Source:
    """The split, the checker (the task's; refused with the contract's message without one), the tries' variants."""
    checking = checker_for(task, problems.meta, acfg.checker or None)
    adapt_idx, heldout = split_problems(len(problems), acfg.heldout, acfg.split_seed)
    log(f"adapt: {len(problems)} problems in {acfg.source} (inputs only, one per group): {len(adapt_idx)} to adapt "
        f"on, {len(heldout)} held out (adapt.heldout={acfg.heldout:g}, split seed {acfg.split_seed})")
    log(f"adapt: the checker: {checking.describe or task.name + ' (its own)'}")
    log(describe_arm(acfg))
    variants = (_variants(task, problems, acfg.trajectories, log) if acfg.select_from != "noise" else None)
    return Source(problems, adapt_idx, heldout, checking, variants)


def _variants(task: Task, problems: Problems, count: int, log: Log) -> Any:
    """The task's variants: count of them, or the most of count, count/2, ... it makes (None: it has none)."""
    if task.variants is None:
        return None
    n = count
    while n >= 1:
        try:
            made = task.variants(problems.meta, n)
        except ValueError:
            n //= 2
            continue
        if n < count:
            log(f"adapt: {n} symmetric variants (the most of {count}, {count}/2, ... the {task.name} task makes)")
        return made
    return None
