"""Resuming a run: its config, its checkpoint's execution settings, the state, and the best weights.

Resuming is explicit (`claim_run_dir`): a training command into a run.dir that already holds a run
is refused unless it says --resume (continue from the newest checkpoint) or --force (start afresh:
the old run's files are deleted once the new run is prepared, `clear_run`); --resume without a
checkpoint is refused. A resumed run that has nothing left to train (`nothing_to_train`: it reached
max_steps, its time budget or stopped early, as its summary.json's "ended" says) says so and trains no
step. Every hint names the command that made the run (`resume_command`: `trmkit train`, `trmkit rl
seed|train`, `trmkit email pretrain`), read from what the run recorded. A training command's config is
the YAML and overrides, or with --resume the run's own config.yaml (`load_for_run`). Before the plan
is made, the newest checkpoint's meta.json says what the run was trained with beyond its config
(train/execution.py), so the resumed run continues bit for bit. `resume_if_possible` loads the newest
valid checkpoint into the session; `save_state` writes one (rank 0, with every
process's own state); `restore_best` loads the best checkpoint's weights at the end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import yaml

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.config import Config, ConfigError
from trmkit.train import checkpoint
from trmkit.train import distributed as dist_mod
from trmkit.plan import Plan
from trmkit.train import state as state_mod
from trmkit.train.session import Session, chooses_by_held_out


Log = Callable[[str], None]

RESUME_IGNORE = ("run", "train.max_steps", "train.max_minutes", "train.eval_every", "train.log_every",
                 "train.checkpoint_every", "train.checkpoint_minutes", "train.keep_checkpoints",
                 "data.eval_limit", "data.path", "train.micro_batch", "train.restore_best",
                 "train.early_stop_evals", "train.best_margin")
PER_RANK_META = ("stream", "rng", "samples_started")  # besides the rank's own tensors (distributed.RANK_KEYS)
# what a run writes into its run.dir: --force deletes these, and nothing else there
RUN_FILES = (rundir.CONFIG, rundir.PLAN, rundir.DATA_META, rundir.METRICS, rundir.SUMMARY, rundir.WEIGHTS,
             rundir.CHECKPOINTS, rundir.REPORT, rundir.TENSORBOARD, rundir.CLASSIFICATION,
             rundir.CLASSIFICATION_VAL, rundir.CALIBRATION, rundir.SUBMISSION, rundir.EVAL_STEPS)


def load_for_run(config: str | None, overrides: list[str], resume: str | None, example: str,
                 apps: config_mod.AppSections | None = None, command: str = "train", log: Log = print) -> Config:
    """The config of a training command: the YAML and overrides, or with resume the run's own
    config.yaml (overrides still apply, run.dir is the resumed directory; a YAML given too is not read,
    said in one line); `apps`: the applications' sections to check with the rest (trmkit/registry.py's
    SECTIONS). command: the command that trains ("train", "rl seed", "rl train", "email pretrain"); a
    run made by another one is refused with the command that continues it."""
    if resume:
        run_dir = Path(resume)
        if not rundir.path(run_dir, rundir.CONFIG).is_file():
            raise ConfigError(f"--resume {run_dir}: no {rundir.CONFIG} there; is it a run directory?")
        check_kind(run_dir, command)
        if config and "=" not in config:
            log(f"resume: {config} is not read: a resumed run keeps its own {run_dir / rundir.CONFIG} "
                "(overrides apply; a new run from the YAML: another run.dir, or --force)")
        extra = ([config] if config and "=" in config else []) + list(overrides)
        return config_mod.load(rundir.path(run_dir, rundir.CONFIG), extra + [f"run.dir={run_dir}"], apps)
    if not config:
        raise ConfigError(f"give a config (e.g. {example}) or --resume RUN_DIR")
    return config_mod.load(config, overrides, apps)


# --------------------------------------------------------------------------- which command made a run

RL_TASK = "selfplay-code"  # data_meta.json's "task" of a seeding or self-play run (rl/objective.py's identity)
PRETRAIN_TASK = "email-mlm"  # the task of `trmkit email pretrain`'s store (email/pretrain.py)


def run_kind(run_dir: str | Path) -> str:
    """The command that trains the run in run_dir: "rl seed", "rl train", "email pretrain", "adapt" or "train",
    from the task and objective it recorded (data_meta.json; a self-play checkpoint's baselines for a run
    from before "objective" was recorded there)."""
    task = rundir.task_of(run_dir)
    if task == PRETRAIN_TASK:
        return "email pretrain"
    if task != RL_TASK:
        return "adapt" if _adapts(run_dir) else "train"
    objective = _read_json(rundir.path(run_dir, rundir.DATA_META)).get("objective")
    if objective in ("seed", "selfplay"):
        return "rl seed" if objective == "seed" else "rl train"
    ckpts = checkpoint.list_checkpoints(run_dir)
    state = _read_json(ckpts[-1] / rundir.CHECKPOINT_META).get("stream") if ckpts else None
    return "rl train" if isinstance(state, dict) and "baselines" in state else "rl seed"


def resume_command(run_dir: str | Path, *overrides: str) -> str:
    """The command that continues the run in run_dir (with overrides, e.g. a larger train.max_minutes)."""
    run, more = Path(run_dir), "".join(f" {o}" for o in overrides)
    kind = run_kind(run)
    if kind == "email pretrain":  # it resumes by itself when the run directory holds checkpoints
        return f"trmkit email pretrain {_pretrain_source(run)}{more} --run-dir {run}"
    return f"trmkit {kind} --resume {run}{more}"


def check_kind(run_dir: Path, command: str) -> None:
    """Refuse to continue with `trmkit COMMAND` a run another command made, naming the one that does."""
    kind = run_kind(run_dir)
    if kind == command:
        return
    if (kind, command) == ("rl seed", "rl train"):
        raise ConfigError(f"{run_dir} is a seeding run (rl seed); continue it with `trmkit rl seed --resume "
                          f"{run_dir}`, or start self-play from it with `trmkit rl train CONFIG --init {run_dir}`")
    task = rundir.task_of(run_dir)
    what = f"a {task} run" if kind == "train" and task else f"a run of `trmkit {kind}`"
    raise ConfigError(f"{run_dir} is {what}, not of `trmkit {command}`: continue it with "
                      f"`{resume_command(run_dir)}`")


def check_evaluable(run_dir: Path, command: str) -> Path:
    """`trmkit eval` and `predict` read a run trained on a store: a self-play or seeding run is refused,
    pointed to `trmkit rl eval`; run_dir else."""
    kind = run_kind(run_dir)
    if kind.startswith("rl "):
        raise ConfigError(f"{run_dir} is a run of `trmkit {kind}`, which `trmkit {command}` does not read: "
                          f"evaluate it with `trmkit rl eval {run_dir}`, continue it with `{resume_command(run_dir)}`")
    return run_dir


def _pretrain_source(run_dir: Path) -> str:
    """The e-mail store an email-mlm run's store was built from (its meta.json's build), else STORE."""
    from trmkit.data.store import META_FILE, StoreError, read_meta

    store = _read_json(rundir.path(run_dir, rundir.DATA_META)).get("path")
    try:
        source = read_meta(Path(store) / "train" / META_FILE).build.get("from") if store else None
    except (OSError, ValueError, StoreError):
        source = None
    return str(source) if source else "STORE"


def _adapts(run_dir: str | Path) -> bool:
    """Whether the run in run_dir is an adaptation (`trmkit adapt`): its config names a new source."""
    try:
        cfg = yaml.safe_load(rundir.path(run_dir, rundir.CONFIG).read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # not readable: the command's own loading says which file
        return False
    section = cfg.get("adapt") if isinstance(cfg, dict) else None
    return isinstance(section, dict) and bool(section.get("source"))


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# --------------------------------------------------------------------------- before the plan


def holds_run(run_dir: str | Path) -> bool:
    """Whether a run has written into run_dir (its config, metrics, summary, weights or a checkpoint)."""
    return (rundir.is_run_dir(run_dir) or rundir.path(run_dir, rundir.WEIGHTS).is_file()
            or bool(checkpoint.list_checkpoints(run_dir)))


def describe_run(run_dir: str | Path) -> str:
    """What a run directory holds, in a few words: its newest checkpoint and whether it finished."""
    ckpts = checkpoint.list_checkpoints(run_dir)
    what = f"checkpoints up to {ckpts[-1].name}" if ckpts else "no checkpoint"
    return what + (", finished: summary.json" if rundir.path(run_dir, rundir.SUMMARY).is_file() else "")


def claim_run_dir(run_dir: str | Path, resume: bool, force: bool, log: Log = print) -> bool:
    """Say what a training command does with its run.dir, and refuse what would mix or lose a run:
    resume (--resume) needs a checkpoint; a new run needs a run.dir that holds no run, unless force.
    It only decides, and touches no file: True when the old run's files are to be deleted
    (force), which `clear_run` does once the new run has been prepared (its config, store and plan
    checked), just before it writes its own (train/run.py)."""
    run = Path(run_dir)
    if resume and force:
        raise ConfigError("--resume continues a run and --force starts it afresh: give one of them")
    if resume:
        if not checkpoint.list_checkpoints(run):
            again = f"trmkit {run_kind(run) if run_kind(run).startswith('rl ') else 'train'} CONFIG"
            raise ConfigError(f"--resume {run}: no checkpoint in {run / rundir.CHECKPOINTS} ({describe_run(run)}) "
                              f"to continue from; start the run again with `{again} run.dir={run} --force`")
        log(f"train: --resume {run} -> continuing from its newest checkpoint ({describe_run(run)})")
        return False
    if not holds_run(run):
        log(f"train: run.dir={run} holds no run -> a new run")
        return False
    if not force:
        raise ConfigError(f"run.dir={run} already holds a run ({describe_run(run)}): continue it with "
                          f"`{resume_command(run)}`, train a new run with another run.dir=..., or add --force "
                          "(force=True from Python) to start afresh there, deleting the old run's checkpoints, "
                          "weights, summary and metrics")
    log(f"train: --force -> a new run in {run}; the old one ({describe_run(run)}) is deleted once the new run's "
        "config, data and plan are checked, just before it writes its first file (its checkpoints, weights, "
        "summary, metrics and report; other files stay)")
    return True


def clear_run(run_dir: Path, log: Log = print) -> None:
    """Delete what a run wrote into run_dir (RUN_FILES), leaving anything else."""
    for name in RUN_FILES:
        path = rundir.path(run_dir, name)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    log(f"train: --force -> deleted the old run's files in {run_dir}; the new run starts")


ENDS = ("max_steps", "max_minutes", "early_stop", "hooks")  # summary.json "ended": why the steps stopped


def nothing_to_train(s: Session, log: Log = print) -> str | None:
    """Why a resumed run trains no further step, said with how to train on; None when it has steps left.

    Done: it reached train.max_steps; or it stopped early and its patience is spent; or its summary says
    it ended on its clock (train.max_minutes) at the step resumed from, and no override raised
    train.max_minutes or train.max_steps above what it ran with. A run stopped by a signal writes no summary
    (or trained past the one it has): it resumes."""
    t, step, run = s.cfg.train, s.state.step, s.cfg.run.dir
    early = chooses_by_held_out(s) and t.early_stop_evals and s.best["evals_since"] >= t.early_stop_evals
    clock = not early and step < t.max_steps and ended_on_clock(run, step, t.max_steps, t.max_minutes)
    if step < t.max_steps and not early and not clock:
        return None
    if early:
        why = (f"stopped early at step {step} ({t.best_metric} had not improved on {s.best['value']:.4f} of step "
               f"{s.best['step']} for {t.early_stop_evals} evaluations)")
        more = f"train.early_stop_evals={t.early_stop_evals + 2}"
    elif clock:
        why = f"ended on its time budget, train.max_minutes={t.max_minutes:g} (step {step} of {t.max_steps})"
        more = f"train.max_minutes={2 * t.max_minutes:g}"
    else:
        why, more = f"reached train.max_steps={t.max_steps} (step {step})", f"train.max_steps={step * 2}"
    log(f"resume: {run} {why}: no step to train; to train on, resume with a larger limit, e.g. "
        f"`{resume_command(run, more)}`")
    return why


def ended_on_clock(run_dir: str | Path, step: int, max_steps: int, max_minutes: float) -> bool:
    """Whether the run's summary says it ended on train.max_minutes at `step`, with limits no larger than
    these (an override that raises either, or max_minutes=0, trains on)."""
    summary = _read_json(rundir.path(run_dir, rundir.SUMMARY))
    if summary.get("ended") != "max_minutes" or summary.get("steps") != step:
        return False
    limits = summary.get("limits") or {}
    raised_minutes = max_minutes == 0 or max_minutes > float(limits.get("max_minutes", max_minutes))
    return not raised_minutes and max_steps <= int(limits.get("max_steps", max_steps))


# --------------------------------------------------------------------------- loading and saving state


def resume_if_possible(s: Session, log: Log = print) -> int | None:
    """Load the newest valid checkpoint of the run directory, if there is one."""
    ckpt = checkpoint.load_latest(s.cfg.run.dir, s.cfg.to_dict(), ignore=RESUME_IGNORE, log=log,
                                  sections=config_mod.section_types(s.cfg))
    if ckpt is None:
        return None
    world = s.run.world
    saved_world = int(ckpt.meta.get("world_size", 1))
    if saved_world == world.size:
        tensors, meta = ckpt.tensors, ckpt.meta
        if ckpt.meta.get("ranks"):  # this rank's carry, samples, RNG and data position
            tensors = dist_mod.own_tensors(ckpt.tensors, world.rank)
            meta = {**ckpt.meta, **ckpt.meta["ranks"][world.rank]}
        state_mod.restore(s.model, s.opts, s.state, s.source(), tensors, meta)
    else:
        restore_other_world(s, ckpt, saved_world, log)
    s.best.update(ckpt.meta.get("best") or {})
    log(f"resumed from {ckpt.path} (step {s.state.step})")
    return s.state.step


def restore_other_world(s: Session, ckpt: checkpoint.LoadedCheckpoint, saved_world: int, log: Log) -> None:
    """Resume a checkpoint written by another number of processes: what is shared continues exactly,
    the per-process ACT carries restart and the data position is the earliest any process had."""
    world, stream = s.run.world, s.data.stream
    tensors = dist_mod.own_tensors(ckpt.tensors, 0)
    state_mod.restore_shared(s.model, s.opts, s.state, tensors, ckpt.meta)
    metas = ckpt.meta.get("ranks") or [{k: ckpt.meta[k] for k in PER_RANK_META}]
    if s.objective is not None:  # an objective run on several processes continues its own state (it says how)
        s.objective.continue_from([m["stream"] for m in metas], saved_world, world.rank, log)
        checkpoint.restore_rng(metas[0]["rng"], tensors)
        return
    position = stream.position_for([m["stream"] for m in metas])
    stream.load_state_dict(position)
    checkpoint.restore_rng(metas[0]["rng"], tensors)
    s.state.samples_started = sum(int(m["samples_started"]) for m in metas) // world.size
    log(f"resume: the checkpoint was written by {saved_world} process(es), this run has {world.size}: weights, "
        f"optimizer, EMA and step continue exactly; the ACT carries restart (every slot takes a new sample) and "
        f"the data continue at epoch {position['epoch']}, position {position['index']} of each process's share, "
        "so samples some old process had already served come again. Not bit-identical to an uninterrupted run; "
        f"resume with {saved_world} process(es) for that")


def save_state(s: Session, metrics: dict, log: Log = print) -> Path | None:
    """Every process calls it; rank 0 writes the one checkpoint, with every process's own state."""
    world = s.run.world
    tensors, meta = state_mod.collect(s.model, s.opts, s.state, s.source())
    if world.active:
        own_meta = {k: meta[k] for k in PER_RANK_META}
        extra, metas = dist_mod.gather_rank_state(tensors, own_meta, world)
        if not world.main:
            return None
        tensors = {**tensors, **extra}
        meta.update(world_size=world.size, ranks=metas)
    meta.update(config=s.cfg.to_dict(), metrics=metrics, execution=execution(s.run.plan, s.ctx.micro_batch),
                best=dict(s.best))
    best = s.cfg.train.best_metric if s.cfg.train.best_metric in metrics else None
    return checkpoint.save_checkpoint(s.cfg.run.dir, s.state.step, tensors, meta,
                                      keep_last=s.cfg.train.keep_checkpoints, best_metric=best, log=log,
                                      best_step=s.best["step"])


def execution(plan: Plan, micro_batch: int) -> dict:
    """What the checkpoint was trained with beyond its config: resume continues with it."""
    return {"micro_batch": micro_batch, "dtype": str(plan.dtype.value),
            "grad_checkpointing": bool(plan.grad_checkpointing.value)}


def restore_best(s: Session, log: Log) -> bool:
    """train.restore_best: load the evaluation weights of the best checkpoint (by best.json).
    Returns whether the weights changed."""
    if not s.cfg.train.restore_best or s.best["step"] in (None, s.state.step):
        return False
    if not chooses_by_held_out(s):  # a best by the test split would report a number chosen on it (said at the
        return False                   # start: loop._say_what_needs_val)
    path = checkpoint.best_checkpoint(s.cfg.run.dir)
    ckpt = checkpoint.load_checkpoint(path) if path is not None else None
    if ckpt is None or ckpt.meta["step"] != s.best["step"]:
        log(f"restore_best: no checkpoint of the best step {s.best['step']} is left; keeping the last weights")
        return False
    state_mod.restore_weights(s.model, ckpt.tensors, s.opts.ema)
    log(f"restore_best: weights of step {s.best['step']} ({s.cfg.train.best_metric} "
        f"{s.best['value']:.4f} on val) from {path}")
    return True
