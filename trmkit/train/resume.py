"""Resuming a run: its config, its checkpoint's execution settings, the state, and the best weights.

A training command's config is the YAML and overrides, or with --resume the run's own
config.yaml (`load_for_run`). Before the plan is made, the newest checkpoint's meta.json says
what the run was trained with beyond its config (train/execution.py), so the resumed run
continues bit for bit. `resume_if_possible`
loads the newest valid checkpoint into the session; `save_state` writes one (rank 0, with every
process's own state); `restore_best` loads the best checkpoint's weights at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

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


def load_for_run(config: str | None, overrides: list[str], resume: str | None, example: str) -> Config:
    """The config of a training command: the YAML and overrides, or with resume the run's own
    config.yaml (overrides still apply, run.dir is the resumed directory)."""
    if resume:
        run_dir = Path(resume)
        if not rundir.path(run_dir, rundir.CONFIG).is_file():
            raise ConfigError(f"--resume {run_dir}: no {rundir.CONFIG} there; is it a run directory?")
        extra = ([config] if config and "=" in config else []) + list(overrides)
        return config_mod.load(rundir.path(run_dir, rundir.CONFIG), extra + [f"run.dir={run_dir}"])
    if not config:
        raise ConfigError(f"give a config (e.g. {example}) or --resume RUN_DIR")
    return config_mod.load(config, overrides)


# --------------------------------------------------------------------------- before the plan


# --------------------------------------------------------------------------- loading and saving state


def resume_if_possible(s: Session, log: Log = print) -> int | None:
    """Load the newest valid checkpoint of the run directory, if there is one."""
    ckpt = checkpoint.load_latest(s.cfg.run.dir, s.cfg.to_dict(), ignore=RESUME_IGNORE, log=log)
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
