"""The training loop: set-up from one Config, steps, periodic evaluation, summary.

`prepare` resolves the config against the data store and the machine (model
fields from meta.json, the planner's choices); `train` runs the loop and writes
RUN_DIR/config.yaml, plan.json, metrics.jsonl and summary.json.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trmkit import config as config_mod
from trmkit import hardware, monitor
from trmkit.config import Config, ConfigError
from trmkit.data.store import SampleStream, Split, eval_batches, open_split
from trmkit.hardware import HardwareInfo
from trmkit.memory import PeakMeter
from trmkit.model.trm import TRM
from trmkit.plan import Plan, apply_to_process, apply_to_model, choose_device, learn_from_peaks, make_plan
from trmkit.train import checkpoint
from trmkit.train import distributed as dist_mod
from trmkit.train.distributed import SINGLE, World
from trmkit.train import state as state_mod
from trmkit.train.evaluate import Scorer, evaluate
from trmkit.train.objective import Objective
from trmkit.train.guard import MemoryGuard, PeakReader
from trmkit.train.optim import EMA, SparseSignSGD, build_optimizer
from trmkit.train.signals import graceful_stop
from trmkit.train.step import Optimizers, StepContext, TrainState, is_out_of_memory, new_state, train_step

Log = Callable[[str], None]


@dataclass
class Session:
    """Everything a run needs, built once by `prepare`."""

    cfg: Config
    plan: Plan
    model: TRM
    opts: Optimizers
    state: TrainState
    stream: SampleStream | None  # None when prepared for evaluation only
    train_split: Split | None
    test_split: Split | None
    ctx: StepContext
    val_split: Split | None = None  # a store's validation split: periodic evaluations and the best use it
    guard: MemoryGuard | None = None
    meter: PeakMeter = field(default_factory=PeakMeter)  # the process's peak RSS, per phase
    cache_dir: Path | None = None  # where the plan's measurements are cached (and learn from this run)
    eval_batch: int = 0  # evaluation slots per forward once an allocation failed (0: the plan's)
    scorer: Callable[[Split], Scorer] | None = None  # the task's extra metrics (tasks/*.py), if any
    best: dict = field(default_factory=lambda: {"value": None, "step": None, "evals_since": 0})
    objective: Objective | None = None  # the policy shape: makes its own batches (train/objective.py)
    world: World = SINGLE  # several processes (train/distributed.py): this one's rank among them

    def agree(self, flags: list[bool]) -> list[bool]:
        """Decisions taken on a clock or a signal, made the same on every process."""
        return dist_mod.agree(flags, self.ctx.device) if self.world.active else flags

    def source(self):
        """What makes the batches, whose position goes into checkpoints: the stream or the objective."""
        return self.objective if self.objective is not None else self.stream


def open_splits(cfg: Config, need_train: bool = True) -> tuple[Split | None, Split | None]:
    """The store's train and test splits; a store built for evaluation only has no train split."""
    root = Path(cfg.data.path)
    if not cfg.data.path:
        raise ConfigError("data.path is empty: build a store with `trmkit data TASK --out DIR` "
                          "(tasks: `trmkit data --help`) and pass data.path=DIR")
    train = open_split(root / "train") if (root / "train").is_dir() else None
    test = open_split(root / "test") if (root / "test").is_dir() else None
    if train is None and (need_train or test is None):
        what = ("it holds only a test split (built with --test-fraction 1, for `trmkit eval RUN --data DIR`)"
                if test is not None else "no train/ or test/ split there")
        raise ConfigError(f"data.path={root}: {what}; build a training store with "
                          f"`trmkit data TASK --out DIR` (e.g. trmkit data sudoku --source generate --out {root})")
    return train, test


def fill_from_meta(cfg: Config, split: Split) -> Config:
    meta = split.meta
    return config_mod.replace(cfg, "model", vocab_size=meta.vocab_size, seq_len=meta.seq_len,
                              num_puzzle_ids=meta.num_puzzle_identifiers, num_classes=len(meta.classes))


def open_val_split(cfg: Config) -> Split | None:
    """DIR/val when the store has one (a classify store does): it picks the best evaluation."""
    path = Path(cfg.data.path) / "val"
    return open_split(path) if path.is_dir() else None


def label_weights(cfg: Config, split: Split, log: Log) -> torch.Tensor | None:
    """train.class_weighting=balanced: weight N / (K * count) per label seen in training, as
    scikit-learn's class_weight="balanced", so every class carries the same total loss."""
    if cfg.train.class_weighting != "balanced":
        return None
    labels = np.asarray(split.labels)
    counts = np.bincount(labels[labels != split.meta.ignore_label_id].ravel(), minlength=split.meta.vocab_size)
    seen = counts > 0
    weights = np.zeros(len(counts))
    weights[seen] = counts[seen].sum() / (seen.sum() * counts[seen])
    names = split.meta.classes or split.meta.vocab
    shown = ", ".join(f"{names[i]} {weights[i]:.2f}" for i in np.flatnonzero(seen)[:12])
    log(f"train: class_weighting=balanced -> loss weights {shown} (N / (K * count) over {int(counts.sum())} labels)")
    return torch.tensor(weights, dtype=torch.float32)


DATA_META_FILE = "data_meta.json"  # the training store's task, vocabulary and shape, kept with the run


def data_identity(split: Split) -> dict:
    """What a store must share with the run's training store for the model to read it."""
    m = split.meta
    return {"task": m.task, "vocab": list(m.vocab), "seq_len": m.seq_len,
            "num_puzzle_identifiers": m.num_puzzle_identifiers, "path": str(split.path.parent)}


def check_data_matches(cfg: Config, split: Split, run_dir: Path) -> None:
    """A store evaluated by a run must have its vocabulary and sequence shape; else a clear error."""
    m, saved = split.meta, {}
    try:
        saved = json.loads((run_dir / DATA_META_FILE).read_text())
    except (OSError, ValueError):
        pass  # runs from before data_meta.json: the sizes in config.yaml are checked
    want = {"task": saved.get("task", m.task), "vocab": saved.get("vocab", list(m.vocab)),
            "vocab_size": cfg.model.vocab_size, "seq_len": cfg.model.seq_len}
    have = {"task": m.task, "vocab": list(m.vocab), "vocab_size": m.vocab_size, "seq_len": m.seq_len}
    wrong = [f"{k} {have[k]!r} (the run's: {want[k]!r})" for k in want if have[k] != want[k]]
    if m.num_puzzle_identifiers > cfg.model.num_puzzle_ids:
        wrong.append(f"num_puzzle_identifiers {m.num_puzzle_identifiers} (the run learned "
                     f"{cfg.model.num_puzzle_ids} puzzle embeddings)")
    if wrong:
        raise ConfigError(f"{split.path}: this store does not fit run {run_dir}: " + "; ".join(wrong)
                          + ". Build the evaluation store with the same task and settings as the run's "
                          "training store (e.g. the same --size for mazes)")


def absolute_data_path(cfg: Config, log: Log) -> Config:
    """A relative data.path is resolved once, at the start, so eval/resume/report work from anywhere."""
    if not cfg.data.path or Path(cfg.data.path).is_absolute():
        return cfg
    path = str(Path(cfg.data.path).resolve())
    log(f"data: data.path={cfg.data.path} -> {path} (stored absolute in the run's config)")
    return config_mod.replace(cfg, "data", path=path)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_optimizers(model: TRM, cfg: Config) -> Optimizers:
    t = cfg.train
    sparse = None
    if model.puzzle_emb is not None:
        sparse = SparseSignSGD(model.puzzle_emb, t.puzzle_emb_lr, t.puzzle_emb_weight_decay)
    ema = EMA(model, t.ema_decay, t.ema_warmup) if t.ema_decay > 0 else None
    return Optimizers(dense=build_optimizer(model.parameters(), t), sparse=sparse, ema=ema)


def saved_meta(run_dir: str) -> dict:
    """meta.json of the run's newest checkpoint ({} for a new run)."""
    paths = checkpoint.list_checkpoints(run_dir)
    if not paths:
        return {}
    try:
        return json.loads((paths[-1] / "meta.json").read_text())
    except (OSError, ValueError):
        return {}  # a damaged newest checkpoint is reported when it is loaded


def resume_dtype(cfg: Config, saved: dict, log: Log) -> Config:
    """A resumed run keeps the compute dtype it was trained in (else it could not be bitwise)."""
    dtype = (saved.get("execution") or {}).get("dtype")
    if dtype and cfg.run.dtype == "auto":
        log(f"resume: dtype={dtype} (the checkpoint was trained in it; a new measurement could pick "
            "another, and the run would no longer continue bit for bit)")
        return config_mod.replace(cfg, "run", dtype=dtype)
    return cfg


def prepare(cfg: Config, hw: HardwareInfo, log: Log = print, cache_dir: Path | None = None,
            budget_bytes: int | None = None, meter: PeakMeter | None = None,
            scorer: Callable[[Split], Scorer] | None = None, evaluate_only: bool = False,
            objective: Objective | None = None, world: World = SINGLE) -> Session:
    """Resolve cfg for the data and this machine, and build model and state.

    The meter (started here unless given) watches every phase from the planner's probes on.
    scorer: the task's extra evaluation metrics (built per evaluation from the test split).
    evaluate_only: for `trmkit eval`: the store may lack a train split and must match the run's.
    objective: a workload that makes its own batches (no store; train/objective.py).
    world: this process's place among several (train/distributed.py); cfg.train.batch_size stays
    the global batch, each process holds its share of the slots."""
    meter = meter or PeakMeter().start()
    if world.active and (objective is not None or evaluate_only):
        raise ConfigError("only `trmkit train` runs on several processes; self-play and evaluation run in one "
                          "(launch them without torchrun)")
    train_split = test_split = None
    if objective is not None:  # the objective, not a store, says what the model reads
        cfg = config_mod.replace(cfg, "model", **objective.model_fields())
    else:
        cfg = absolute_data_path(cfg, log)
        train_split, test_split = open_splits(cfg, need_train=not evaluate_only)
        if evaluate_only:  # the run's config already holds the model's shape; the store must match it
            check_data_matches(cfg, test_split or train_split, Path(cfg.run.dir))
        else:
            cfg = fill_from_meta(cfg, train_split)
    saved = saved_meta(cfg.run.dir)
    cfg = resume_dtype(cfg, saved, log)
    local = dist_mod.local_config(cfg, world) if world.active else cfg  # this process's slots
    if world.active:
        backend = dist_mod.start(world, str(choose_device(cfg.run.device, hw).value), cfg.run.dist_timeout)
        log(dist_mod.environment_summary(world, backend))
    with meter.phase("plan"):  # dtype and speed probes, compile measurement, calibration
        plan = None
        if world.main:  # one plan for every process, made while the others wait (no probe competes)
            plan = make_plan(local, hw, budget_bytes=budget_bytes, cache_dir=cache_dir, log=log,
                             saved_config=saved.get("config"), world=world.size, ranks_here=world.local_size)
        if world.active:
            plan = dist_mod.share_object(plan, world)
    apply_to_process(plan)
    with meter.phase("setup"):
        seed_everything(cfg.run.seed)
        device = plan.torch_device()
        model = TRM(cfg.model).to(device)
        log(f"model: {model.num_parameters():,} trainable parameters "
            f"(mixer={cfg.model.mixer}, D={cfg.model.hidden_size}, layers={cfg.model.L_layers}, "
            f"T={cfg.model.H_cycles}, n={cfg.model.L_cycles}, N_sup={cfg.model.halt_max_steps})")
        opts = build_optimizers(model, cfg)  # before compiling: EMA and optimizer see plain parameters
        apply_to_model(plan, model)
        slots = 0 if objective is not None else local.train.batch_size  # an objective keeps no ACT carry
        state = new_state(model, slots, cfg.model.seq_len, device)
        net = dist_mod.wrap(model) if world.active else None  # after compiling, as DDP asks
        if world.active and opts.sparse is not None:
            opts.sparse.gather = dist_mod.gather_rows
    guard = make_guard(local, plan, hw, log, meter)  # after model and state exist: it reads the RSS
    micro = resume_micro_batch(guard.micro_batch if guard else int(plan.micro_batch.value), saved, log)
    if guard is not None:
        guard.micro_batch = micro
    weights = label_weights(cfg, train_split, log) if train_split is not None else None
    ignore = (train_split or test_split).meta.ignore_label_id if objective is None else -100
    ctx = StepContext(micro_batch=micro, ignore_label_id=ignore,
                      device=device, autocast=plan.autocast(),
                      label_weights=weights.to(device) if weights is not None else None,
                      net=net, reduce_after=dist_mod.reduce_after(net) if net is not None else None,
                      rank=world.rank, world=world.size)
    stream = SampleStream(train_split, cfg.run.seed, world.rank, world.size) if train_split else None
    return Session(cfg=cfg, plan=plan, model=model, opts=opts, state=state,
                   stream=stream, train_split=train_split,
                   test_split=test_split, ctx=ctx, guard=guard, meter=meter, cache_dir=cache_dir, scorer=scorer,
                   val_split=None if evaluate_only or objective is not None else open_val_split(cfg),
                   objective=objective, world=world)


def resume_micro_batch(planned: int, saved: dict, log: Log) -> int:
    """The micro-batch the checkpoint was trained at, when this plan allows it (bitwise resume)."""
    was = (saved.get("execution") or {}).get("micro_batch")
    if not was or was == planned:
        return planned
    if was < planned:
        log(f"resume: micro_batch={was} (the checkpoint was trained at it, after the memory guard "
            f"acted; the plan allows {planned}): gradients sum in the same order, bit for bit")
        return int(was)
    log(f"resume: the checkpoint was trained at micro_batch={was}, but this budget allows only "
        f"{planned}: training continues at {planned}, with the same effective batch; gradients sum "
        "in another order, so the run is not bitwise identical to an uninterrupted one")
    return planned


def make_guard(cfg: Config, plan: Plan, hw: HardwareInfo, log: Log, meter: PeakMeter | None = None
               ) -> MemoryGuard | None:
    if not cfg.run.memory_guard or not plan.is_cpu or not plan.budget.value:
        return None
    mb, est = int(plan.micro_batch.value), plan.estimate
    guard = MemoryGuard(budget=int(plan.budget.value), batch_size=cfg.train.batch_size, micro_batch=mb,
                        max_micro_batch=mb, log=log, reader=PeakReader(hw.memory, meter),
                        slot_bytes=est.micro_per_slot if est else 0)
    if est is not None:  # a first step that does not fit is OOM-killed under a cgroup, not retried
        guard.preflight(est.train_peak)
    return guard


def run_eval(s: Session, limit: int | None = None, log: Log = print, split: Split | None = None
             ) -> dict[str, float]:
    """Evaluate on the test split (or `split`) with the EMA weights (when EMA is on). An allocation
    that fails halves the evaluation batch (kept for later evaluations) and evaluates again."""
    split = split or s.test_split
    if split is None and s.objective is not None:
        return _evaluate_objective(s)
    if split is None:
        return {}
    limit = limit if limit is not None else (s.cfg.data.eval_limit or None)
    share = (s.world.rank, s.world.size) if s.world.active and s.scorer is None else (0, 1)  # see _evaluate
    while True:
        size = s.eval_batch or int(s.plan.eval_batch.value)
        try:
            return _evaluate(s, eval_batches(split, size, limit, *share), log, split)
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err) or size <= 1 or s.world.active:  # the other processes would not retry
                raise
            s.eval_batch = size // 2
            hardware.trim_heap()
            log(f"memory: evaluation at {size} slots failed to allocate ({str(err).splitlines()[0][:100]}); "
                f"evaluating again at {s.eval_batch}")


def _evaluate_objective(s: Session) -> dict[str, float]:
    if s.opts.ema is not None:
        s.opts.ema.swap(s.model)
    try:
        return s.objective.evaluate(s.model, s.ctx)
    finally:
        if s.opts.ema is not None:
            s.opts.ema.swap(s.model)


def _evaluate(s: Session, batches, log: Log = print, split: Split | None = None) -> dict[str, float]:
    split = split or s.test_split
    if s.opts.ema is not None:
        s.opts.ema.swap(s.model)
    try:
        if s.world.active and s.scorer is not None:  # the task's metrics need every answer in one place
            result = _evaluate_here(s, batches, log, split) if s.world.main else None
            return dist_mod.share_object(result, s.world)  # the others wait (run.dist_timeout)
        if s.world.active:  # each process evaluates its share of the batches; the sums are added
            return evaluate(s.model, batches, s.ctx, split.meta.blank_id, None, reduce=dist_mod.sum_totals)
        return _evaluate_here(s, batches, log, split)
    finally:
        if s.opts.ema is not None:
            s.opts.ema.swap(s.model)


def _evaluate_here(s: Session, batches, log: Log, split: Split) -> dict[str, float]:
    scorer = s.scorer(split) if s.scorer is not None else None
    result = evaluate(s.model, batches, s.ctx, split.meta.blank_id, scorer)
    if hasattr(scorer, "save"):  # the task's answers, e.g. an ARC Prize submission
        log(f"eval: answers written to {scorer.save(s.cfg.run.dir)}")
    return result


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(path)


RESUME_IGNORE = ("run", "train.max_steps", "train.max_minutes", "train.eval_every", "train.log_every",
                 "train.checkpoint_every", "train.checkpoint_minutes", "train.keep_checkpoints",
                 "data.eval_limit", "data.path", "train.micro_batch", "train.restore_best",
                 "train.early_stop_evals")


def resume_if_possible(s: Session, log: Log = print) -> int | None:
    """Load the newest valid checkpoint of the run directory, if there is one."""
    ckpt = checkpoint.load_latest(s.cfg.run.dir, s.cfg.to_dict(), ignore=RESUME_IGNORE, log=log)
    if ckpt is None:
        return None
    saved_world = int(ckpt.meta.get("world_size", 1))
    if saved_world == s.world.size:
        tensors, meta = ckpt.tensors, ckpt.meta
        if ckpt.meta.get("ranks"):  # this rank's carry, samples, RNG and data position
            tensors = dist_mod.own_tensors(ckpt.tensors, s.world.rank)
            meta = {**ckpt.meta, **ckpt.meta["ranks"][s.world.rank]}
        state_mod.restore(s.model, s.opts, s.state, s.source(), tensors, meta)
    else:
        restore_other_world(s, ckpt, saved_world, log)
    s.best.update(ckpt.meta.get("best") or {})
    log(f"resumed from {ckpt.path} (step {s.state.step})")
    return s.state.step


PER_RANK_META = ("stream", "rng", "samples_started")  # besides the rank's own tensors (distributed.RANK_KEYS)


def restore_other_world(s: Session, ckpt, saved_world: int, log: Log) -> None:
    """Resume a checkpoint written by another number of processes: what is shared continues exactly,
    the per-process ACT carries restart and the data position is the earliest any process had."""
    tensors = dist_mod.own_tensors(ckpt.tensors, 0)
    state_mod.restore_shared(s.model, s.opts, s.state, tensors, ckpt.meta)
    metas = ckpt.meta.get("ranks") or [{k: ckpt.meta[k] for k in PER_RANK_META}]
    position = s.stream.position_for([m["stream"] for m in metas])
    s.stream.load_state_dict(position)
    checkpoint.restore_rng(metas[0]["rng"], tensors)
    s.state.samples_started = sum(int(m["samples_started"]) for m in metas) // s.world.size
    log(f"resume: the checkpoint was written by {saved_world} process(es), this run has {s.world.size}: weights, "
        f"optimizer, EMA and step continue exactly; the ACT carries restart (every slot takes a new sample) and "
        f"the data continue at epoch {position['epoch']}, position {position['index']} of each process's share, "
        "so samples some old process had already served come again. Not bit-identical to an uninterrupted run; "
        f"resume with {saved_world} process(es) for that")


def save_state(s: Session, metrics: dict, log: Log = print) -> Path | None:
    """Every process calls it; rank 0 writes the one checkpoint, with every process's own state."""
    tensors, meta = state_mod.collect(s.model, s.opts, s.state, s.source())
    if s.world.active:
        own_meta = {k: meta[k] for k in PER_RANK_META}
        extra, metas = dist_mod.gather_rank_state(tensors, own_meta, s.world)
        if not s.world.main:
            return None
        tensors = {**tensors, **extra}
        meta.update(world_size=s.world.size, ranks=metas)
    meta.update(config=s.cfg.to_dict(), metrics=metrics, execution=execution(s), best=dict(s.best))
    best = s.cfg.train.best_metric if s.cfg.train.best_metric in metrics else None
    return checkpoint.save_checkpoint(s.cfg.run.dir, s.state.step, tensors, meta,
                                      keep_last=s.cfg.train.keep_checkpoints, best_metric=best, log=log)


def execution(s: Session) -> dict:
    """What the checkpoint was trained with beyond its config: resume continues with it."""
    return {"micro_batch": s.ctx.micro_batch, "dtype": str(s.plan.dtype.value),
            "grad_checkpointing": bool(s.plan.grad_checkpointing.value)}


@dataclass
class Clock:
    """Wall-time bookkeeping of one session of a run."""

    start: float = field(default_factory=time.perf_counter)
    eval_seconds: float = 0.0
    ckpt_seconds: float = 0.0
    last_ckpt: float = field(default_factory=time.perf_counter)
    samples: int = 0
    warnings: list[str] = field(default_factory=list)

    def train_seconds(self) -> float:
        return time.perf_counter() - self.start - self.eval_seconds - self.ckpt_seconds


def _checkpoint_due(cfg: Config, step: int, clock: Clock) -> bool:
    t = cfg.train
    by_steps = t.checkpoint_every > 0 and step % t.checkpoint_every == 0
    by_time = t.checkpoint_minutes > 0 and time.perf_counter() - clock.last_ckpt > 60 * t.checkpoint_minutes
    return by_steps or by_time


def _timed_save(s: Session, clock: Clock, metrics: dict, log: Log) -> None:
    t0 = time.perf_counter()
    with s.meter.phase("save"):
        save_state(s, metrics, log)
        if s.world.active:  # nobody reads the checkpoint (restore_best) before rank 0 has written it
            dist_mod.barrier()
    clock.ckpt_seconds += time.perf_counter() - t0
    clock.last_ckpt = time.perf_counter()


def _timed_eval(s: Session, clock: Clock, loggers, log: Log, split: Split | None = None,
                prefix: str = "eval") -> dict:
    t0 = time.perf_counter()
    with s.meter.phase("eval"):
        evals = run_eval(s, log=log, split=split)
    clock.eval_seconds += time.perf_counter() - t0
    if evals:
        loggers.log(s.state.step, {f"{prefix}/{k}": v for k, v in evals.items()})
    return evals


def _periodic_eval(s: Session, clock: Clock, loggers, log: Log) -> dict:
    """Evaluate on the validation split when the store has one (the test split stays unseen until
    the end), else on the test split; track the best by train.best_metric."""
    split, prefix = (s.val_split, "val") if s.val_split is not None else (None, "eval")
    evals = _timed_eval(s, clock, loggers, log, split, prefix)
    value = evals.get(s.cfg.train.best_metric)
    if value is not None:
        if s.best["value"] is None or value > s.best["value"]:
            s.best.update(value=float(value), step=s.state.step, evals_since=0)
        else:
            s.best["evals_since"] += 1
    return evals


def _evaluated_at(cfg: Config, step: int) -> bool:
    """Whether the loop evaluates after `step` (the end has its own evaluation)."""
    return bool(cfg.train.eval_every) and step % cfg.train.eval_every == 0 and step < cfg.train.max_steps


def _early_stop(s: Session, log: Log) -> bool:
    patience = s.cfg.train.early_stop_evals
    if patience and s.best["evals_since"] >= patience:
        log(f"early stop: {s.cfg.train.best_metric} has not improved on {s.best['value']:.4f} (step "
            f"{s.best['step']}) for {patience} evaluations (train.early_stop_evals={patience})")
        return True
    return False


def restore_best(s: Session, log: Log) -> bool:
    """train.restore_best: load the evaluation weights of the best checkpoint (by best.json).
    Returns whether the weights changed."""
    if not s.cfg.train.restore_best or s.best["step"] in (None, s.state.step):
        return False
    if s.val_split is None:  # the best by the test split would report a number chosen on it
        log("restore_best: the store has no val/ split, so the best was judged on test; keeping the last "
            "weights (build the store with a validation share)")
        return False
    path = checkpoint.best_checkpoint(s.cfg.run.dir)
    ckpt = checkpoint.load_checkpoint(path) if path is not None else None
    if ckpt is None or ckpt.meta["step"] != s.best["step"]:
        log(f"restore_best: no checkpoint of the best step {s.best['step']} is left; keeping the last weights")
        return False
    tensors = ckpt.tensors
    s.model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
    if s.opts.ema is not None:
        for k in s.opts.ema.shadow:
            s.opts.ema.shadow[k].copy_(tensors[f"ema.{k}"])
    log(f"restore_best: weights of step {s.best['step']} ({s.cfg.train.best_metric} "
        f"{s.best['value']:.4f} on val) from {path}")
    return True


def _one_step(s: Session, clock: Clock, loggers, progress, sampler, watch, log: Log) -> dict:
    t0 = time.perf_counter()
    on_oom = (lambda err: s.guard.on_oom(s.state.step, err)) if s.guard else None
    with s.meter.phase("train step"):
        if s.objective is not None:
            metrics = s.objective.step(s.model, s.opts, s.cfg.train, s.ctx, on_oom)
            s.state.step += 1
        else:
            metrics = train_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx, on_oom)
    dt = time.perf_counter() - t0
    if s.guard is not None:
        s.ctx.micro_batch = s.guard.observe(s.state.step, s.guard.reader.read())
        metrics["perf/micro_batch"] = s.ctx.micro_batch
    samples = metrics.pop("perf/samples", s.cfg.train.batch_size)
    clock.samples += samples
    metrics["perf/samples_per_second"] = samples / dt
    metrics["perf/seconds_per_step"] = dt
    step = s.state.step
    if step % max(1, s.cfg.train.log_every) == 0 or step == 1:
        if s.world.active:  # the loss and accuracy over every process's slots
            metrics = dist_mod.mean_metrics(metrics)
        metrics.update(thermal_metrics())
        loggers.log(step, {**metrics, **sampler.sample()})
        warning = watch.check(metrics["perf/samples_per_second"], step)
        if warning:
            clock.warnings.append(warning)
            progress.close()
            log(f"warning: {warning}")
    progress.update(step, metrics)
    return metrics


def thermal_metrics() -> dict[str, float]:
    """Temperature and clock ratio where readable without root (else nothing)."""
    t = hardware.read_thermal()
    out = {}
    if t.max_temp_c is not None:
        out["sys/temperature_c"] = t.max_temp_c
    if t.freq_ratio is not None:
        out["sys/freq_ratio"] = t.freq_ratio
    return out


def train(s: Session, is_tty: bool = False, log: Log = print) -> dict:
    """Run (or resume) the loop until max_steps, the time budget, or a stop signal.
    With several processes every one runs it; rank 0 alone writes files and logs."""
    cfg, main = s.cfg, s.world.main
    run_dir = Path(cfg.run.dir)
    with s.meter.phase("resume"):
        resumed = resume_if_possible(s, log)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        config_mod.save(cfg, run_dir / "config.yaml")
        write_json(run_dir / DATA_META_FILE, s.objective.identity() if s.objective is not None
                   else data_identity(s.train_split))
        write_json(run_dir / "plan.json", s.plan.to_dict())
    loggers = monitor.make_loggers(run_dir, None, log) if main else monitor.MultiLogger([])
    loggers.log_config(cfg.to_dict())
    peak = s.meter.process_peak
    sampler, clock, watch = monitor.SystemSampler(peak_bytes=peak), Clock(), monitor.ThroughputWatch()
    progress = monitor.Progress(cfg.train.max_steps, is_tty and main, log=log,
                                sampler=monitor.SystemSampler(peak_bytes=peak), cores=int(s.plan.threads.value))
    evals: dict = {}
    with graceful_stop(log) as stop:
        while s.state.step < cfg.train.max_steps:
            _one_step(s, clock, loggers, progress, sampler, watch, log)
            step = s.state.step
            stopped, late, due = s.agree([stop.requested, _out_of_time(cfg, clock.start),
                                          _checkpoint_due(cfg, step, clock)])
            if stopped:
                stop.signal_name = stop.signal_name or "a stop signal on another process"
                break
            stop_early = saved = False
            if _evaluated_at(cfg, step):
                evals = _periodic_eval(s, clock, loggers, log)  # the same result on every process
                progress.close()
                log(f"{'val' if s.val_split is not None else 'eval'} @ step {step}: " + _fmt_eval(evals))
                stop_early = _early_stop(s, log)
                if s.best["step"] == step and cfg.train.restore_best:
                    _timed_save(s, clock, evals, log)  # the best's weights stay on disk to restore
                    saved = True
            if (due or stop_early) and not saved and not late:  # late: the end saves
                _timed_save(s, clock, evals, log)
            if stop_early or late:
                break
        progress.close()
        if s.agree([stop.signal_name is not None])[0]:  # a signal that came after the step's agreement
            stop.signal_name = stop.signal_name or "a stop signal on another process"
            _timed_save(s, clock, evals, log)
            loggers.close()
            again = (f"torchrun --nproc-per-node {s.world.local_size} -m trmkit train --resume {run_dir} (or "
                     f"trmkit train --resume {run_dir} --nproc {s.world.size})" if s.world.active
                     else f"trmkit train --resume {run_dir}")
            log(f"stopped by {stop.signal_name} at step {s.state.step}; resume with: {again}")
            return {"stopped": stop.signal_name, "steps": s.state.step}
        # has the validation split already scored the weights in hand (the loop's last evaluation)?
        val_current = s.val_split is not None and _evaluated_at(cfg, s.state.step)
        if cfg.train.restore_best:  # the state to resume from is the last step's, not the best's
            if s.val_split is not None and not val_current:  # are the last weights the best?
                evals = _periodic_eval(s, clock, loggers, log)
                val_current = True
            _timed_save(s, clock, evals, log)
            val_current = val_current and not restore_best(s, log)
        if s.val_split is not None and not val_current:  # e.g. a classifier's calibration is fitted on it
            _timed_eval(s, clock, loggers, log, s.val_split, "val")
        evals = _timed_eval(s, clock, loggers, log) or evals
        if not cfg.train.restore_best:
            _timed_save(s, clock, evals, log)
    loggers.close()
    peaks = dist_mod.gather_object(s.meter.process_peak(), s.world) if s.world.active else None
    if not main:
        s.meter.stop()
        return {"steps": s.state.step, "rank": s.world.rank}
    with s.meter.phase("save"):
        save_weights(s, run_dir)
    with s.meter.phase("summary"):
        summary = _finish(s, clock, sampler, evals, resumed, log, peaks)
    s.meter.stop()  # the kernel's mark still answers process_peak()
    return summary


def _finish(s: Session, clock: Clock, sampler, evals: dict, resumed, log: Log,
            rank_peaks: list[int] | None = None) -> dict:
    run_dir = Path(s.cfg.run.dir)
    history = monitor.read_metrics(run_dir / "metrics.jsonl")
    facts = monitor.RunFacts(
        device=str(s.plan.device.value), cores=int(s.plan.threads.value), threads=int(s.plan.threads.value),
        peak_rss_gb=s.meter.process_peak() / 2**30, final_metrics=evals, train_seconds=clock.train_seconds(),
        eval_seconds=clock.eval_seconds, wall_seconds=time.perf_counter() - clock.start,
        samples_seen=clock.samples, throughput_warnings=clock.warnings,
        memory_budget_gb=(int(s.plan.budget.value) / 2**30) if s.plan.budget.value else None,
        guard_adjustments=[a["message"] for a in s.guard.adjustments] if s.guard else [],
    )
    summary = monitor.summarize(history, facts)
    summary.update({k: v for k, v in evals.items()})
    summary["samples_per_second_stats"] = summary.pop("samples_per_second")
    summary.update(steps=s.state.step, samples_per_second=clock.samples / max(clock.train_seconds(), 1e-9),
                   wall_seconds=facts.wall_seconds, parameters=s.model.num_parameters(),
                   resumed_from_step=resumed, plan=s.plan.to_dict(),
                   memory_guard=s.guard.adjustments if s.guard else "off",
                   memory=memory_summary(s, log))
    if rank_peaks is not None:  # every process's peak RSS, as the kernel saw it
        summary.update(world_size=s.world.size, peak_rss_gb_per_rank=[round(p / 2**30, 3) for p in rank_peaks])
        log(f"distributed: {s.world.size} processes, peak RSS per rank "
            + ", ".join(f"{p / 2**30:.2f} GB" for p in rank_peaks))
    write_json(run_dir / "summary.json", summary)
    log(monitor.format_summary(summary))
    log("final: " + _fmt_eval(evals) + f" | {summary['samples_per_second']:.1f} samples/s, "
        f"{summary['wall_seconds']:.0f} s -> {run_dir / 'summary.json'}")
    return summary


def memory_summary(s: Session, log: Log = print) -> dict:
    """Per-phase peaks against the plan's estimates; the calibration cache learns where one was low.

    A phase is charged only for what it added: with freed memory kept in the process, an
    evaluation that starts at the training step's resident memory and needs less stays there."""
    report = s.meter.report()
    est = s.plan.estimate
    if est is None or not s.plan.is_cpu:
        return {"phases": report}
    step_est = est.train_peak - (est.micro_batch - s.ctx.micro_batch) * est.micro_per_slot
    estimates = {"train step": step_est, "eval": est.eval_peak, "process": max(step_est, est.eval_peak)}
    checks, deficits = {}, {}
    for name, estimate in estimates.items():
        phase = s.meter.phases.get(name)
        peak, start = (phase.peak, phase.start) if phase else (s.meter.process_peak(), 0)
        if name != "process" and phase is None:
            continue
        checks[name] = {"estimate_gb": round(estimate / 2**30, 3), "peak_gb": round(peak / 2**30, 3),
                        "error": round(peak / estimate - 1, 3), "resident_at_start_gb": round(start / 2**30, 3)}
        deficits[name] = peak - max(estimate, start)
    learned = learn_from_peaks(s.cfg.model, str(s.plan.dtype.value), s.cache_dir, deficits,
                               source=f"run {s.cfg.run.dir}")
    for name in ("train step", "eval"):
        if deficits.get(name, 0) > 2**20:
            c = checks[name]
            log(f"memory: {name} rose {deficits[name] / 2**20:.0f} MiB above both the plan's estimate "
                f"({c['estimate_gb']:.2f} GiB) and what was resident when it began ({c['resident_at_start_gb']:.2f} "
                f"GiB), to {c['peak_gb']:.2f} GiB" + ("; the calibration cache learned it, the next run plans for it"
                                                      if learned else ""))
    return {"phases": report, "estimate_check": checks, "calibration_learned": learned}


def _out_of_time(cfg: Config, start: float) -> bool:
    return cfg.train.max_minutes > 0 and time.perf_counter() - start > 60 * cfg.train.max_minutes


GENERIC_EVAL = ("cell_accuracy", "blank_accuracy", "exact_accuracy", "loss", "act_steps", "samples")


def _fmt_eval(evals: dict) -> str:
    if not evals:
        return "no test split to evaluate"
    shown = [f"{k} {evals[k]:.3f}" for k in GENERIC_EVAL[:4] if k in evals]
    shown += [f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in evals.items()
              if k not in GENERIC_EVAL and "/" not in k]  # the task's own (per-class ones in the summary)
    steps = f", act_steps {evals['act_steps']:.2f}" if "act_steps" in evals else ""
    return ", ".join(shown) + steps + f" (n={evals.get('samples', '?')})"


WEIGHTS_FILE = "weights.safetensors"


def save_weights(s: Session, run_dir: Path) -> Path:
    """The evaluation weights (EMA when on) and buffers, atomically."""
    from safetensors.torch import save_file

    if s.opts.ema is not None:
        s.opts.ema.swap(s.model)
    try:
        tensors = {k: v.detach().clone().cpu() for k, v in s.model.state_dict().items()}  # copies
    finally:
        if s.opts.ema is not None:
            s.opts.ema.swap(s.model)
    path = run_dir / WEIGHTS_FILE
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(path)
    return path


def load_weights(s: Session, run_dir: Path) -> None:
    """Load evaluation weights into the model; EMA is dropped (they already are EMA)."""
    from safetensors.torch import load_file

    path = Path(run_dir) / WEIGHTS_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: train this run to the end first (`trmkit train`)")
    s.model.load_state_dict(load_file(str(path), device=str(s.ctx.device)))
    s.opts.ema = None
