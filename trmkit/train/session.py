"""One training session: what it is made of, and `prepare`, which builds it from one Config.

`prepare` resolves the config against the data store and the machine once (`resolve_config`: data.path made
absolute, model fields from the store's meta.json or the objective, a resumed run's dtype), then builds the rest
from that final config: the planner's choices, model, optimizers, slot state, memory guard and step settings.

A `Session` groups what travels together: `Data` (the store's splits and the sample stream) and `Runtime` (the
plan, the peak meter, the memory guard, this process's place among several). `Clock` keeps the wall-time
bookkeeping of one session.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.config import Config, ConfigError
from trmkit.data.store import Split, StoreMeta, open_split
from trmkit.data.curriculum import RatedSampler
from trmkit.data.generated import GeneratedStream, Sampler
from trmkit.data.hints import MissingStore
from trmkit.data.stream import SampleStream
from trmkit.hardware import HardwareInfo
from trmkit.hardware.memory import PeakMeter
from trmkit.model.parts import PartsFactory, build_parts
from trmkit.model.trm import TRM
from trmkit.plan import Plan, apply_to_model, apply_to_process, make_plan
from trmkit.plan.device import choose_device
from trmkit.train import depth
from trmkit.train.data_identity import (check_store_unchanged, recorded_identity, same_path,
                                        warn_if_unfingerprinted)
from trmkit.train.init import init_from
from trmkit.train import distributed as dist_mod
from trmkit.train.distributed import SINGLE, World
from trmkit.train.scorer import Scorer
from trmkit.train.guard import MemoryGuard, PeakReader
from trmkit.train.objective import Objective, empty_state, owns_model, policy_plan_log, with_policy_plan
from trmkit.train.optim import EMA, SparseSignSGD, build_optimizer
from trmkit.train.execution import resume_dtype, resume_micro_batch, saved_meta
from trmkit.train.step import Optimizers, StepContext, TrainState, new_state

Log = Callable[[str], None]


@dataclass
class Data:
    """The store's splits and the stream that samples the training split (none of them for an objective)."""

    train: Split | None = None
    test: Split | None = None
    val: Split | None = None  # a store's validation split: periodic evaluations and the best use it
    stream: SampleStream | None = None  # None when prepared for evaluation only


@dataclass
class Runtime:
    """How this process runs: the plan, its peak meter, the memory guard, its place among several."""

    plan: Plan
    meter: PeakMeter = field(default_factory=PeakMeter)  # the process's peak RSS, per phase
    guard: MemoryGuard | None = None
    world: World = SINGLE  # several processes (train/distributed.py): this one's rank among them
    cache_dir: Path | None = None  # where the plan's measurements are cached (and learn from this run)
    eval_batch: int = 0  # evaluation slots per forward once an allocation failed (0: the plan's)


@dataclass
class Session:
    """Everything a run needs, built once by `prepare`."""

    cfg: Config
    model: TRM
    opts: Optimizers
    state: TrainState
    ctx: StepContext
    data: Data
    run: Runtime
    scorer: Callable[[Split], Scorer] | None = None  # the task's extra metrics (tasks/*.py), if any
    objective: Objective | None = None  # makes its own batches instead of a store (train/objective.py)
    best: dict = field(default_factory=lambda: {"value": None, "step": None, "evals_since": 0})
    started: float = 0.0  # perf_counter when prepare began: train.max_minutes counts the time before training

    def source(self):
        """What makes the batches, whose position goes into checkpoints: the stream or the objective."""
        return self.objective if self.objective is not None else self.data.stream


def chooses_by_held_out(s: Session) -> bool:
    """Whether evaluations may choose (early stop, best checkpoint): they run on a validation split, or on
    an objective's own held-out tasks; a store without val/ evaluates on its test split, where a choice
    would report a number picked on it."""
    return s.data.val is not None or s.objective is not None


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


# --------------------------------------------------------------------------- the store


def open_splits(data_path: str, need_train: bool = True, task: str | None = None
                ) -> tuple[Split | None, Split | None]:
    """The store's train and test splits; a store built for evaluation only has no train split. A missing
    one is a MissingStore naming how to build it, for `task` when known (a run's data_meta.json)."""
    root = Path(data_path)
    if not data_path:
        raise ConfigError("data.path is empty: build a store with `trmkit data TASK --out DIR` "
                          "(tasks: `trmkit data --help`) and pass data.path=DIR")
    train = open_split(root / "train") if (root / "train").is_dir() else None
    test = open_split(root / "test") if (root / "test").is_dir() else None
    if train is None and (need_train or test is None):
        what = ("it holds only a test split (built with --test-fraction 1, for `trmkit eval RUN --data DIR`)"
                if test is not None else "no train/ or test/ split there")
        raise MissingStore(root, what, task)
    return train, test


def model_fields(split: Split, mixer: str) -> dict[str, int]:
    """The model fields a store decides: vocabulary, sequence length, puzzle ids, classes, and for
    the conv mixer the grid's shape."""
    meta = split.meta
    fields = {"vocab_size": meta.vocab_size, "seq_len": meta.seq_len,
              "num_puzzle_ids": meta.num_puzzle_identifiers, "num_classes": len(meta.classes),
              "part_positions": meta.part_positions, "answer_vocab": meta.answer_vocab}
    if mixer == "conv":
        fields.update(grid_fields(split))
    return fields


def batch_fields(meta: StoreMeta) -> dict[str, int]:
    """The model fields of batches shaped as another store's grid (trmkit adapt on a larger grid, which refuses a
    model with positions or a store without a grid before: adapt/problems.py size_change): length and grid."""
    return {"seq_len": meta.seq_len, "grid_height": meta.grid_shape[0], "grid_width": meta.grid_shape[1]}


def grid_fields(split: Split) -> dict[str, int]:
    if split.meta.grid_shape is None:
        raise ConfigError(f"{split.path}: model.mixer=conv needs a grid store, and this {split.meta.task} store "
                          "records no grid_shape: rebuild it with `trmkit data TASK` (or use mixer=attention)")
    return {"grid_height": split.meta.grid_shape[0], "grid_width": split.meta.grid_shape[1]}


def fill_from_meta(cfg: Config, split: Split) -> Config:
    return config_mod.replace(cfg, "model", **model_fields(split, cfg.model.mixer))


def open_val_split(data_path: str) -> Split | None:
    """DIR/val when the store has one (a classify store does): it picks the best evaluation."""
    path = Path(data_path) / "val"
    return open_split(path) if path.is_dir() else None


def label_weights(cfg: Config, split: Split, log: Log) -> torch.Tensor | None:
    """Per-label loss weights: train.class_weighting=balanced (N / (K * count), below), times
    train.class_weights ("o=2.5": by vocabulary name)."""
    balanced = balanced_weights(cfg, split, log) if cfg.train.class_weighting == "balanced" else None
    named = config_mod.parse_weights(cfg.train.class_weights)
    if not named:
        return balanced
    names = list(split.meta.classes or split.meta.vocab)
    unknown = [n for n in named if n not in names]
    if unknown:
        raise ConfigError(f"train.class_weights names {unknown}, not labels of this store: use one of {names}")
    weights = balanced if balanced is not None else torch.ones(len(names))
    for name, w in named.items():
        weights[names.index(name)] *= w
    log(f"train: class_weights={cfg.train.class_weights} -> the loss of " + ", ".join(
        f"{n!r} x{w:g}" for n, w in named.items()) + " (moves their decision threshold)")
    return weights


def balanced_weights(cfg: Config, split: Split, log: Log) -> torch.Tensor:
    """Weight N / (K * count) per label seen in training, as scikit-learn's class_weight="balanced",
    so every class carries the same total loss."""
    labels = np.asarray(split.labels)
    counts = np.bincount(labels[labels != split.meta.ignore_label_id].ravel(), minlength=split.meta.vocab_size)
    seen = counts > 0
    weights = np.zeros(len(counts))
    weights[seen] = counts[seen].sum() / (seen.sum() * counts[seen])
    names = split.meta.classes or split.meta.vocab
    shown = ", ".join(f"{names[i]} {weights[i]:.2f}" for i in np.flatnonzero(seen)[:12])
    log(f"train: class_weighting=balanced -> loss weights {shown} (N / (K * count) over {int(counts.sum())} labels)")
    return torch.tensor(weights, dtype=torch.float32)


def check_data_matches(cfg: Config, split: Split, run_dir: Path, log: Log = print) -> dict[str, int]:
    """A store evaluated by a run must have its task, vocabulary and sequence shape, and the run's own
    store (the same path) must be unchanged since training; else a clear error. A conv model has no
    positions: it reads a grid of any size, and the model fields that change with it are returned ({}
    when nothing changes)."""
    m, saved = split.meta, recorded_identity(run_dir)  # {}: a run from before data_meta.json, config.yaml's sizes
    if same_path(saved.get("path", ""), split.path.parent):
        check_store_unchanged(split.path.parent, run_dir, saved, log,
                              "evaluate another store with --data, or train a new run on this one")
    want = {"task": saved.get("task", m.task), "vocab": saved.get("vocab", list(m.vocab)),
            "vocab_size": cfg.model.vocab_size, "seq_len": cfg.model.seq_len}
    have = {"task": m.task, "vocab": list(m.vocab), "vocab_size": m.vocab_size, "seq_len": m.seq_len}
    resized = cfg.model.mixer == "conv" and have["seq_len"] != want["seq_len"]
    wrong = [f"{k} {_brief(k, have)} (the run's: {_brief(k, want)})" for k in want
             if have[k] != want[k] and not (k == "seq_len" and resized)]
    if m.num_puzzle_identifiers > cfg.model.num_puzzle_ids:
        wrong.append(f"num_puzzle_identifiers {m.num_puzzle_identifiers} (the run learned "
                     f"{cfg.model.num_puzzle_ids} puzzle embeddings)")
    if wrong:
        sized = ("; only a model without positions (model.mixer=conv) reads a grid of another size, "
                 f"this run's has mixer={cfg.model.mixer}" if any(w.startswith("seq_len") for w in wrong) else "")
        raise ConfigError(f"{split.path}: this store does not fit run {run_dir}: " + "; ".join(wrong) + sized
                          + ". Build the evaluation store with the same task and settings as the run's "
                          "training store (e.g. the same --size for mazes)")
    return {"seq_len": m.seq_len, **grid_fields(split)} if resized else {}


def _brief(key: str, identity: dict) -> str:
    """One field of a store's identity for an error line: a vocabulary by its task, size and first tokens
    (an e-mail store's has thousands)."""
    if key != "vocab":
        return repr(identity[key])
    vocab = identity[key]
    return (f"{identity['task']}, {len(vocab)} tokens: " + ", ".join(map(repr, vocab[:6]))
            + (", ..." if len(vocab) > 6 else ""))


def absolute_data_path(data_path: str, log: Log) -> str:
    """A relative data.path is resolved once, at the start, so eval/resume/report work from anywhere."""
    if not data_path or Path(data_path).is_absolute():
        return data_path
    path = str(Path(data_path).resolve())
    log(f"data: data.path={data_path} -> {path} (stored absolute in the run's config)")
    return path


# --------------------------------------------------------------------------- building a session


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


def resolve_config(cfg: Config, objective: Objective | None, evaluate_only: bool, saved: dict, log: Log,
                   batch_meta: StoreMeta | None = None) -> tuple[Config, Data]:
    """The run's final config, and the store's splits it was resolved from.

    data.path becomes absolute; the model fields come from the objective (it says what the
    model reads) or from the training store, while `trmkit eval` keeps the run's model shape and
    checks the store against it; a resumed run keeps the dtype its checkpoint was trained in."""
    path, fields, data = cfg.data.path, {}, Data()
    if objective is not None:
        fields = objective.model_fields()
    else:
        path = absolute_data_path(cfg.data.path, log)
        generated = cfg.data.stream == "generate"  # the store may then hold only the held-out split
        data.train, data.test = open_splits(path, need_train=not (evaluate_only or generated),
                                            task=rundir.task_of(cfg.run.dir) if evaluate_only else None)
        if evaluate_only:  # the run's config already holds the model's shape; the store must match it
            fields = check_data_matches(cfg, data.test or data.train, Path(cfg.run.dir), log)
            if fields:
                log(f"eval: a conv model without positions reads this {fields['grid_height']} x "
                    f"{fields['grid_width']} grid with the weights it learned on {cfg.model.grid_height} x "
                    f"{cfg.model.grid_width}")
        else:
            if saved:  # a resumed run goes on with the data it started on
                check_store_unchanged(Path(path), Path(cfg.run.dir), recorded_identity(cfg.run.dir), log,
                                      f"train a new run on it (another run.dir, or --force to start "
                                      f"{cfg.run.dir} afresh)")
            else:
                warn_if_unfingerprinted(Path(path), None, log)
            fields = model_fields(data.train or data.test, cfg.model.mixer)
            fields.update(batch_fields(batch_meta) if batch_meta is not None else {})
    model = dataclasses.replace(cfg.model, **fields)  # checked before the resume is looked at
    run = dataclasses.replace(cfg.run, dtype=resume_dtype(cfg.run.dtype, saved, log))
    return dataclasses.replace(cfg, run=run, model=model, data=dataclasses.replace(cfg.data, path=path)), data


def plan_run(cfg: Config, local: Config, hw: HardwareInfo, world: World, meter: PeakMeter, saved: dict,
             log: Log, cache_dir: Path | None, objective: Objective | None = None) -> Plan:
    """The planner's choices, made once on rank 0 and shared with every process; applied to this one (an
    objective with its own policy sets the micro-batch: train/objective.py `with_policy_plan`)."""
    if world.active:
        backend = dist_mod.start(world, str(choose_device(cfg.run.device, hw).value), cfg.run.dist_timeout)
        log(dist_mod.environment_summary(world, backend))
    with meter.phase("plan"):  # dtype and speed probes, compile measurement, calibration
        plan, said = None, policy_plan_log(log) if owns_model(objective) else log  # a policy says its own step
        if world.main:  # one plan for every process, made while the others wait (no probe competes)
            plan = make_plan(local, hw, cache_dir=cache_dir, log=said,
                             saved_config=saved.get("config"), world=world.size, ranks_here=world.local_size)
        if world.active:
            plan = dist_mod.share_object(plan, world)
        if owns_model(objective):
            plan = with_policy_plan(plan, objective, log)
    apply_to_process(plan)
    return plan


def build_model(cfg: Config, plan: Plan, slots: int, world: World, log: Log, parts: PartsFactory | None = None,
                objective: Objective | None = None) -> tuple[TRM, Optimizers, TrainState, Callable | None]:
    """Seed, then model (with the task's parts), optimizers, compiled net and slot state, in the order of
    their random draws; an objective with its own policy builds its model and optimizers itself."""
    seed_everything(cfg.run.seed)
    device = plan.torch_device()
    if owns_model(objective):
        model = objective.build_model(device, log)
        return model, objective.build_optimizers(model), empty_state(device), None
    model = TRM(cfg.model, build_parts(parts, cfg)).to(device)
    if model.extra_outputs != len(cfg.model.trace_ids):
        raise ConfigError(f"model.trace_answers={cfg.model.trace_answers!r}: a model trained on a trace folds "
                          f"its {len(cfg.model.trace_ids)} trace outputs with its task's model part, and the "
                          f"store's task gives {model.extra_outputs} (a maze trace needs the maze task's)")
    log(f"model: {model.num_parameters():,} trainable parameters "
        f"(mixer={cfg.model.mixer}, D={cfg.model.hidden_size}, layers={cfg.model.L_layers}, "
        f"T={cfg.model.H_cycles}, n={cfg.model.L_cycles}, N_sup={cfg.model.halt_max_steps})")
    if cfg.train.progressive_loss:
        log(f"train: progressive_loss={cfg.train.progressive_loss} -> that share of new samples starts from the "
            f"detached carry of 1..{cfg.model.halt_max_steps} steps (N_sup) without gradients (train/step.py)")
    ends = depth.stage_ends(cfg.train.depth_curriculum)
    if ends:
        log(f"train: depth_curriculum={cfg.train.depth_curriculum} -> {depth.describe(cfg.model, ends)}, "
            "in training steps only; evaluation runs the full depth (train/depth.py)")
    opts = build_optimizers(model, cfg)  # before compiling: EMA and optimizer see plain parameters
    apply_to_model(plan, model)
    state = new_state(model, slots, cfg.model.seq_len, device)
    net = dist_mod.wrap(model) if world.active else None  # after compiling, as DDP asks
    if world.active and opts.sparse is not None:
        opts.sparse.gather = dist_mod.gather_rows
    return model, opts, state, net


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


def step_context(cfg: Config, data: Data, objective: Objective | None, plan: Plan, micro: int,
                 net: Callable | None, world: World, log: Log) -> StepContext:
    """How a step runs: micro-batch, ignored label, device, autocast, loss weights, several processes."""
    weights = label_weights(cfg, data.train, log) if data.train is not None else None
    ignore = (data.train or data.test).meta.ignore_label_id if objective is None else -100
    device = plan.torch_device()
    given = given_tokens(cfg, data, log) if objective is None else None
    return StepContext(micro_batch=micro, ignore_label_id=ignore,
                       device=device, autocast=plan.autocast(),
                       label_weights=weights.to(device) if weights is not None else None,
                       given_tokens=given.to(device) if given is not None else None,
                       net=net, reduce_after=dist_mod.reduce_after(net) if net is not None else None,
                       rank=world.rank, world=world.size)


def given_tokens(cfg: Config, data: Data, log: Log) -> torch.Tensor | None:
    """train.mask_given: the store's given tokens, whose cells carry no loss and count in no metric."""
    if not cfg.train.mask_given:
        return None
    meta = (data.train or data.test).meta
    if not meta.given_tokens:
        raise ConfigError(f"train.mask_given=true, but the {meta.task} store names no given_tokens (the cells "
                          "its answers repeat from the input): set train.mask_given=false")
    log(f"train: mask_given -> cells holding {[meta.vocab[t] for t in meta.given_tokens]} carry no loss "
        "and count in no metric (the answer repeats the input there)")
    return torch.tensor(meta.given_tokens, dtype=torch.int64)


def training_stream(cfg: Config, data: Data, world: World, sampler: Callable[..., Sampler] | None,
                    log: Log) -> SampleStream | GeneratedStream:
    """The store's training split; with data.stream=curriculum the same split easiest-first (data/curriculum.py);
    with data.stream=generate the task's generator."""
    if cfg.data.stream == "store":
        return SampleStream(data.train, cfg.run.seed, world.rank, world.size)
    if cfg.data.stream == "curriculum":
        if data.train is None:
            raise ConfigError(f"{cfg.data.path}: data.stream=curriculum draws from the training split; there is none")
        stream = GeneratedStream(RatedSampler(data.train), cfg.run.seed, world.rank, world.size,
                                 cfg.data.curriculum_samples)
        log(f"data: stream=curriculum -> the training split easy to hard over {cfg.data.curriculum_samples:,} "
            f"samples: {stream.describe(0.0)} -> all {data.train.num_groups:,} groups, drawn with replacement "
            f"(seed {cfg.run.seed}, resumable)")
        return stream
    meta = (data.train or data.test).meta
    if sampler is None:
        raise ConfigError(f"data.stream=generate: the {meta.task} task has no generator (mazes have one); "
                          "set data.stream=store")
    stream = GeneratedStream(sampler(meta, cfg), cfg.run.seed, world.rank, world.size, cfg.data.curriculum_samples)
    ramp = (f"a curriculum over {cfg.data.curriculum_samples:,} samples: {stream.describe(0.0)} -> "
            f"{stream.describe(1.0)}" if cfg.data.curriculum_samples else stream.describe(1.0))
    log(f"data: stream=generate -> every training sample fresh from the {meta.task} generator (seed "
        f"{cfg.run.seed}, resumable); {ramp}; the store gives the shapes and the held-out split")
    return stream


def trace_outputs(cfg: Config, sampler: Callable[..., Sampler] | None, log: Log, evaluate_only: bool = False) -> Config:
    """data.trace: the task's generator labels every supervision step with its search's trace, in tokens
    beyond the answer's (the sampler's trace_tokens: (name, answer id) each); model.trace_answers records
    the answer id each one stands for, so evaluation folds them into the answer (TRM.answer_logits).
    `trmkit eval` keeps the run's, and says how the answer is read (the task's own words, trace_reading)."""
    reading = getattr(sampler, "trace_reading", None)
    if evaluate_only:
        if cfg.model.trace_ids and reading:
            log(f"eval: a model trained on a trace: {reading(cfg)}")
        return cfg
    if not cfg.data.trace:
        return config_mod.replace(cfg, "model", trace_answers="")
    tokens = getattr(sampler, "trace_tokens", ()) if cfg.data.stream == "generate" else ()
    if not tokens:
        what = "data.stream=generate" if cfg.data.stream != "generate" else "a generator that writes one"
        raise ConfigError(f"data.trace={cfg.data.trace} needs {what} (mazes: configs/maze-trace.yaml); "
                          "set data.trace=0 to train on the answer alone")
    answers = ",".join(str(answer) for _, answer in tokens)
    log(f"data: trace={cfg.data.trace} -> every supervision step k is labelled with the search's state after "
        f"{cfg.data.trace} x k cells of it ({len(tokens)} trace tokens: {' '.join(repr(n) for n, _ in tokens)}); "
        f"{reading(cfg) if reading else 'evaluation reads the answer they stand for'}")
    return config_mod.replace(cfg, "model", trace_answers=answers)


def prepare(cfg: Config, hw: HardwareInfo, log: Log = print, cache_dir: Path | None = None,
            meter: PeakMeter | None = None, scorer: Callable[[Split], Scorer] | None = None,
            evaluate_only: bool = False, objective: Objective | None = None, world: World = SINGLE,
            sampler: Callable[..., Sampler] | None = None, before_training: Callable[..., None] | None = None,
            parts: PartsFactory | None = None, fresh: bool = False,
            wrap_stream: Callable[..., object] | None = None, batch_meta: StoreMeta | None = None) -> Session:
    """Resolve cfg for the data and this machine, and build model and state.

    The meter (started here unless given) watches every phase from the planner's probes on.
    scorer: the task's extra evaluation metrics (built per evaluation from the test split).
    evaluate_only: for `trmkit eval`: the store may lack a train split and must match the run's.
    objective: a workload that makes its own batches (no store; train/objective.py).
    world: this process's place among several (train/distributed.py); batch_size stays global, split in slots.
    sampler: the task's generator (data.stream=generate): (store meta, cfg) -> one example at a difficulty; the
    task reads its own knobs from cfg (the maze task's section `maze:`).
    before_training: the task's hook (model, training split, class weights, log), called once the model and the
    training split exist, e.g. to fit frozen weights (the e-mail task's email.input_linear); a resumed run reloads
    its checkpoint after it. parts: the task's pieces of the model (model/parts.py).
    fresh: a new run in a run.dir whose old run is deleted after this (--force): its checkpoints are not read.
    wrap_stream: a source of samples around the store's stream, set before a resume loads it (trmkit/adapt/);
    batch_meta: a store whose length the batches have, not data.path's (adapt to a larger grid: batch_fields)."""
    started, meter = time.perf_counter(), meter or PeakMeter().start()
    if world.active and (evaluate_only or not getattr(objective, "distributed", objective is None)):
        raise ConfigError("only `trmkit train` and an LM policy's `trmkit rl train` run on several processes; seeding "
                          "and evaluation run in one (launch them without torchrun or --nproc)")
    saved = {} if fresh else saved_meta(cfg.run.dir)
    trained = {} if evaluate_only else saved  # eval resumes no training: no checkpoint's shape or micro-batch
    cfg, data = resolve_config(cfg, objective, evaluate_only, saved, log, batch_meta)
    cfg = trace_outputs(cfg, sampler, log, evaluate_only) if objective is None else cfg
    local = dist_mod.local_config(cfg, world) if world.active else cfg  # this process's slots
    plan = plan_run(cfg, local, hw, world, meter, trained, log, cache_dir, objective)
    with meter.phase("setup"):
        slots = 0 if objective is not None else local.train.batch_size  # an objective keeps no ACT carry
        model, opts, state, net = build_model(cfg, plan, slots, world, log, parts, objective)
    guard = make_guard(local, plan, hw, log, meter)  # after model and state exist: it reads the RSS
    micro = resume_micro_batch(guard.micro_batch if guard else int(plan.micro_batch.value), trained, log)
    if guard is not None:
        guard.micro_batch = micro
    ctx = step_context(cfg, data, objective, plan, micro, net, world, log)
    if objective is None and not evaluate_only:
        data.stream = training_stream(cfg, data, world, sampler, log)
        data.stream = wrap_stream(data.stream) if wrap_stream is not None else data.stream
        data.val = open_val_split(cfg.data.path)
        if cfg.train.init_from and not saved:  # a resumed run reads its checkpoint instead
            init_from(model, opts.ema, cfg.train.init_from, list((data.train or data.test).meta.vocab), log)
        if before_training is not None:
            before_training(model, data.train, ctx.label_weights, log)
    return Session(cfg=cfg, model=model, opts=opts, state=state, ctx=ctx, data=data,
                   run=Runtime(plan=plan, meter=meter, guard=guard, world=world, cache_dir=cache_dir),
                   scorer=scorer, objective=objective, started=started)
