"""The training loop: steps, periodic evaluation, checkpoints on a clock, early stop, the end.

`train` runs a session built by `prepare` (train/session.py) until train.max_steps, the time
budget, a stop signal or its hooks' stop (train/hooks.py; train/run.py, the one way in, calls it),
and writes RUN_DIR/config.yaml, data_meta.json, plan.json and metrics.jsonl (a resumed run with no
step left writes nothing when it has finished: its summary stays as it was); checkpoints go through
train/resume.py, the weights and summary.json through train/finish.py. With several processes every
one runs it; rank 0 alone writes files and logs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from trmkit import config as config_mod
from trmkit import files, hardware, monitor, rundir
from trmkit.config import Config, ConfigError, TrainConfig
from trmkit.data.store import Split
from trmkit.model.trm import TRM
from trmkit.train import distributed as dist_mod
from trmkit.train import depth, timefit
from trmkit.train.distributed import World
from trmkit.train.evaluate import format_eval, run_eval
from trmkit.train.finish import finish
from trmkit.train.hooks import NO_HOOKS, Hooks
from trmkit.train.resume import nothing_to_train, restore_best, resume_command, resume_if_possible, save_state
from trmkit.train.data_identity import data_identity
from trmkit.train.session import Clock, Session, chooses_by_held_out
from trmkit.train.signals import exit_code, graceful_stop
from trmkit.train.step import Optimizers, SampleSource, StepContext, TrainState, train_step
from trmkit.train.timefit import TimeFit

Log = Callable[[str], None]


@dataclass
class Monitors:
    """Where a run's progress goes: metric loggers, the progress line, system samples, throughput drops."""

    loggers: monitor.MultiLogger
    progress: monitor.Progress
    sampler: monitor.SystemSampler
    watch: monitor.ThroughputWatch


def train(s: Session, is_tty: bool = False, log: Log = print, hooks: Hooks = NO_HOOKS) -> dict:
    """Run (or resume) the loop until max_steps, the time budget, a stop signal, or the hooks' stop.
    With several processes every one runs it; rank 0 alone writes files and logs."""
    run_dir, main = Path(s.cfg.run.dir), s.run.world.main
    with graceful_stop(log) as stop:  # from the start: a signal during set-up stops after the first step, saved
        with s.run.meter.phase("resume"):
            resumed = resume_if_possible(s, log)
        done = nothing_to_train(s, log) if resumed is not None else None
        summary = rundir.path(run_dir, rundir.SUMMARY)
        if done and summary.is_file():  # finished: its files stay as they are
            s.run.meter.stop()
            return {**json.loads(summary.read_text()), "nothing_trained": done}
        if main:
            write_run_files(s, run_dir)
        loggers = monitor.make_loggers(run_dir, None, log) if main else monitor.MultiLogger([])
        loggers.log_config(s.cfg.to_dict())
        peak = s.run.meter.process_peak
        sampler, clock, watch = monitor.SystemSampler(peak_bytes=peak), Clock(), monitor.ThroughputWatch()
        progress = monitor.Progress(s.cfg.train.max_steps, is_tty and main, log=log,
                                    sampler=monitor.SystemSampler(peak_bytes=peak),
                                    cores=int(s.run.plan.threads.value), time_limit_s=60 * s.cfg.train.max_minutes)
        out = Monitors(loggers, progress, sampler, watch)
        # done: only the end was missing (its reason is the one nothing_to_train found)
        evals, ended = ({}, _ended_before(s)) if done else _run_steps(s, clock, out, stop, log, hooks)
        progress.close()
        late_signal = [stop.signal_name is not None]  # a signal that came after the step's agreement
        if _agree(s.run.world, s.ctx.device, late_signal)[0]:
            return _stopped(s, clock, loggers, evals, stop, log)
        own = hooks.evaluation(s)
        if own is not None:  # the hooks have evaluated the weights in hand: saved, not evaluated again
            evals = own
            _timed_save(s, clock, evals, log)
        else:
            evals = _final_evaluations(s, clock, loggers, evals, log)
    loggers.close()
    return finish(s, clock, evals, resumed, log, ended)


def write_run_files(s: Session, run_dir: Path) -> None:
    """The resolved config, what the run is trained on (the store's identity or the objective's),
    and the plan with its reasons."""
    run_dir.mkdir(parents=True, exist_ok=True)
    files.write_text(rundir.path(run_dir, rundir.CONFIG), config_mod.to_yaml(s.cfg))
    files.write_json(rundir.path(run_dir, rundir.DATA_META),
                     s.objective.identity() if s.objective is not None else data_identity(s.data.train or s.data.test))
    files.write_json(rundir.path(run_dir, rundir.PLAN), s.run.plan.to_dict())


def _agree(world: World, device: torch.device, flags: list[bool]) -> list[bool]:
    """Decisions taken on a clock or a signal, made the same on every process."""
    return dist_mod.agree(flags, device) if world.active else flags


def _run_steps(s: Session, clock: Clock, out: Monitors, stop, log: Log, hooks: Hooks) -> tuple[dict, str]:
    """Steps until max_steps, a stop signal, the time budget, an early stop or the hooks' stop (with
    hooks.owns_end: a stop signal or the hooks' stop only); the last periodic evaluation, and why the steps
    ended (summary.json "ended": train/resume.py ENDS, or "signal")."""
    evals: dict = {}
    ended = "max_steps"
    _say_what_needs_val(s, log)
    fit = _time_fit(s, clock, log)
    hooks.on_start(s)
    while hooks.owns_end or s.state.step < s.cfg.train.max_steps:
        hooks.on_step(s, _one_step(s, clock, out, log))
        step = s.state.step
        if fit is not None:
            _refit(s, fit, out, log)
        cfg = s.cfg  # as the hooks and the time fit left it
        out.progress.total_steps = cfg.train.max_steps
        hooks_stop = hooks.should_stop(s)
        ends = hooks_stop or (not hooks.owns_end and _out_of_time(cfg, budget_start(s, clock)))
        flags = [stop.requested, ends, _checkpoint_due(cfg, step, clock)]
        stopped, late, due = _agree(s.run.world, s.ctx.device, flags)
        if stopped:
            stop.signal_name = stop.signal_name or "a stop signal on another process"
            ended = "signal"
            break
        stop_early = saved = False
        if _evaluated_at(cfg, step):
            evals, stop_early, saved = _evaluate_in_loop(s, clock, out, log)
        if (due or stop_early) and not saved and not late:  # late: the end saves
            _timed_save(s, clock, evals, log)
        if stop_early or late:
            ended = "early_stop" if stop_early else "hooks" if hooks_stop else "max_minutes"
            break
    return evals, ended


def _ended_before(s: Session) -> str:
    """Why a resumed run with nothing to train had ended (its end is written again: summary.json was missing)."""
    return "max_steps" if s.state.step >= s.cfg.train.max_steps else "early_stop"


def _say_what_needs_val(s: Session, log: Log) -> None:
    """Early stopping and restore_best choose by a validation split; without one they are off, said why
    (they would choose on the test split, e.g. a store built with --keep-labels, whose labels are scarce)."""
    t = s.cfg.train
    needs = [f"train.early_stop_evals={t.early_stop_evals}"] * bool(t.early_stop_evals)
    needs += ["train.restore_best=true"] * t.restore_best
    if needs and not chooses_by_held_out(s):
        log(f"train: {' and '.join(needs)} off: the store has no validation split, and choosing on the test "
            "split would report a number picked on it; the run trains to its end and keeps its last weights")


def _time_fit(s: Session, clock: Clock, log: Log) -> TimeFit | None:
    """A TimeFit when train.fit_to_time asks for one and this run can use it, else None (said why)."""
    t = s.cfg.train
    if not t.fit_to_time:
        return None
    if s.run.world.active:
        log(f"time: several processes: train.max_steps={t.max_steps} is kept (not fitted to the time); "
            f"train.max_minutes={t.max_minutes:g} stops the run")
        return None
    if s.state.step > 0:
        log(f"time: resumed at step {s.state.step}: train.max_steps={t.max_steps} as fitted before is kept")
        return None
    spent = clock.start - budget_start(s, clock)
    log(f"time: train.max_steps will be fitted to {t.max_minutes:g} minutes from the measured step time "
        f"(first after {min(timefit.FIT_AFTER_S, 30 * t.max_minutes):g} s of steps, again at "
        f"{', '.join(f'{r:.0%}' for r in timefit.REFIT_AT)} of the budget); "
        + timefit.spent_before(spent, t.max_minutes))
    return TimeFit(budget_s=60 * t.max_minutes, start_s=budget_start(s, clock), model=s.cfg.model,
                   ends=depth.stage_ends(t.depth_curriculum))


def budget_start(s: Session, clock: Clock) -> float:
    """Where train.max_minutes counts from: the start of the session's preparation (planning, the task's fit
    before training), so that `--minutes N` is N minutes of the command, not N after a long fit."""
    return s.started or clock.start


def _refit(s: Session, fit: TimeFit, out: Monitors, log: Log) -> Config:
    """Apply a due fit to the session's config (and the run's config.yaml, which resume reads)."""
    due = fit.observe(s.state.step, time.perf_counter(), s.cfg.train.max_steps)
    if due is not None:
        total, why = due
        s.cfg = config_mod.replace(s.cfg, "train", max_steps=total)
        out.progress.total_steps = total
        if s.run.world.main:
            files.write_text(rundir.path(Path(s.cfg.run.dir), rundir.CONFIG), config_mod.to_yaml(s.cfg))
        log(f"time: {why}")
    return s.cfg


def run_step(model: TRM, state: TrainState, stream: SampleSource, opts: Optimizers, t: TrainConfig, ctx: StepContext,
             on_oom: Callable[[BaseException], int] | None = None) -> dict[str, float]:
    """One optimizer step of a store-backed run: the loop's steps, and the steps `trmkit bench` times (the
    bench measures the step under the config's own settings, not a training: no plan, run directory or
    evaluation), so that what the bench times is what the loop runs."""
    return train_step(model, state, stream, opts, t, ctx, on_oom)


def _one_step(s: Session, clock: Clock, out: Monitors, log: Log) -> dict:
    t0 = time.perf_counter()
    guard = s.run.guard
    on_oom = (lambda err: guard.on_oom(s.state.step, err)) if guard else None
    with s.run.meter.phase("train step"):
        if s.objective is not None:
            metrics = s.objective.step(s.model, s.opts, s.cfg.train, s.ctx, on_oom)
            s.state.step += 1
        else:
            metrics = run_step(s.model, s.state, s.data.stream, s.opts, s.cfg.train, s.ctx, on_oom)
    dt = time.perf_counter() - t0
    if guard is not None:
        s.ctx.micro_batch = guard.observe(s.state.step, guard.reader.read())
        metrics["perf/micro_batch"] = s.ctx.micro_batch
    samples = metrics.pop("perf/samples", s.cfg.train.batch_size)
    clock.samples += samples
    metrics["perf/samples_per_second"] = samples / dt
    metrics["perf/seconds_per_step"] = dt
    step = s.state.step
    if step % max(1, s.cfg.train.log_every) == 0 or step == 1:
        if s.run.world.active:  # the loss and accuracy over every process's slots
            metrics = dist_mod.mean_metrics(metrics)
        metrics.update(thermal_metrics())
        out.loggers.log(step, {**metrics, **out.sampler.sample()})
        warning = out.watch.check(metrics["perf/samples_per_second"], step)
        if warning:
            clock.warnings.append(warning)
            out.progress.close()
            log(f"warning: {warning}")
    out.progress.update(step, metrics)
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


def _evaluate_in_loop(s: Session, clock: Clock, out: Monitors, log: Log) -> tuple[dict, bool, bool]:
    """A periodic evaluation: (its metrics, whether to stop early, whether a checkpoint was saved)."""
    step = s.state.step
    out.progress.close()
    evals = _periodic_eval(s, clock, out.loggers, log)  # the same result on every process
    stop_early = chooses_by_held_out(s) and _early_stop(s.cfg.train, s.best, log)  # never on the test split
    saved = s.best["step"] == step and s.cfg.train.restore_best and chooses_by_held_out(s)
    if saved:
        _timed_save(s, clock, evals, log)  # the best's weights stay on disk to restore
    return evals, stop_early, saved


def _stopped(s: Session, clock: Clock, loggers, evals: dict, stop, log: Log) -> dict:
    """A stop signal: save a checkpoint and say how to resume."""
    stop.signal_name = stop.signal_name or "a stop signal on another process"
    _timed_save(s, clock, evals, log)
    loggers.close()
    run_dir, world = Path(s.cfg.run.dir), s.run.world
    again = (f"torchrun --nproc-per-node {world.local_size} -m trmkit train --resume {run_dir} (or "
             f"trmkit train --resume {run_dir} --nproc {world.size})" if world.active
             else resume_command(run_dir))  # the command that made it: train, rl seed|train, email pretrain
    code = exit_code(stop.signal_name)
    log(f"stopped by {stop.signal_name} at step {s.state.step} (checkpoint saved; exit code {code}); "
        f"resume with: {again}")
    return {"stopped": stop.signal_name, "steps": s.state.step, "exit_code": code}


def _final_evaluations(s: Session, clock: Clock, loggers, evals: dict, log: Log) -> dict:
    """The end: the last state saved, the best weights restored (train.restore_best), the
    validation split scored on the weights kept, then the test split; the test metrics."""
    cfg, val = s.cfg, s.data.val
    # has the validation split already scored the weights in hand (the loop's last evaluation)?
    val_current = val is not None and _evaluated_at(cfg, s.state.step)
    if cfg.train.restore_best:  # the state to resume from is the last step's, not the best's
        if val is not None and not val_current:  # are the last weights the best?
            evals = _periodic_eval(s, clock, loggers, log)
            val_current = True
        _timed_save(s, clock, evals, log)
        restored = restore_best(s, log)  # first: `val_current and not restore_best(...)` skipped it without val/
        val_current = val_current and not restored
    if val is not None and not val_current:  # e.g. a classifier's calibration is fitted on it
        _timed_eval(s, clock, loggers, log, val, "val")
    evals = _timed_eval(s, clock, loggers, log) or evals
    if not cfg.train.restore_best:
        _timed_save(s, clock, evals, log)
    return evals


def _out_of_time(cfg: Config, start: float) -> bool:
    return cfg.train.max_minutes > 0 and time.perf_counter() - start > 60 * cfg.train.max_minutes


def _checkpoint_due(cfg: Config, step: int, clock: Clock) -> bool:
    t = cfg.train
    by_steps = t.checkpoint_every > 0 and step % t.checkpoint_every == 0
    by_time = t.checkpoint_minutes > 0 and time.perf_counter() - clock.last_ckpt > 60 * t.checkpoint_minutes
    return by_steps or by_time


def _timed_save(s: Session, clock: Clock, metrics: dict, log: Log) -> None:
    t0 = time.perf_counter()
    with s.run.meter.phase("save"):
        save_state(s, metrics, log)
        if s.run.world.active:  # nobody reads the checkpoint (restore_best) before rank 0 has written it
            dist_mod.barrier()
    clock.ckpt_seconds += time.perf_counter() - t0
    clock.last_ckpt = time.perf_counter()


def _timed_eval(s: Session, clock: Clock, loggers, log: Log, split: Split | None = None,
                prefix: str = "eval") -> dict:
    t0 = time.perf_counter()
    with s.run.meter.phase("eval"):
        evals = run_eval(s, log=log, split=split)
    clock.eval_seconds += time.perf_counter() - t0
    if evals:
        loggers.log(s.state.step, {f"{prefix}/{k}": v for k, v in evals.items()})
    return evals


def _periodic_eval(s: Session, clock: Clock, loggers, log: Log) -> dict:
    """Evaluate on the validation split when the store has one (the test split stays unseen until
    the end), else on the test split; track the best by train.best_metric."""
    split, prefix = (s.data.val, "val") if s.data.val is not None else (None, "eval")
    evals = _timed_eval(s, clock, loggers, log, split, prefix)
    log(f"{prefix} @ step {s.state.step}: " + format_eval(evals))
    value = evals.get(s.cfg.train.best_metric)
    if value is not None:
        if s.best["value"] is None or value > s.best["value"] + _best_margin(s.cfg.train, s.best, evals, log):
            s.best.update(value=float(value), step=s.state.step, evals_since=0)
        else:
            s.best["evals_since"] += 1
    return evals


def _best_margin(t: TrainConfig, best: dict, evals: dict, log: Log) -> float:
    """How far a new evaluation must beat the kept best (train.best_margin): 0, or its standard error,
    said when a higher value stays within it."""
    if t.best_margin == "none":
        return 0.0
    key = f"se/{t.best_metric}"
    if key not in evals:
        raise ConfigError(f"train.best_margin=se needs the evaluation to report {key}, and this task's does not "
                          f"(it reports {sorted(evals)}): set train.best_margin=none")
    value, margin = evals[t.best_metric], float(evals[key])
    if best["value"] < value <= best["value"] + margin:
        log(f"best: {t.best_metric} {value:.4f} is above the kept {best['value']:.4f} (step {best['step']}) "
            f"by {value - best['value']:.4f}, within its standard error {margin:.4f} on this split "
            "(train.best_margin=se): the kept weights stay the best")
    return margin


def _evaluated_at(cfg: Config, step: int) -> bool:
    """Whether the loop evaluates after `step` (the end has its own evaluation)."""
    return bool(cfg.train.eval_every) and step % cfg.train.eval_every == 0 and step < cfg.train.max_steps


def _early_stop(t: TrainConfig, best: dict, log: Log) -> bool:
    patience = t.early_stop_evals
    if patience and best["evals_since"] >= patience:
        log(f"early stop: {t.best_metric} has not improved on {best['value']:.4f} (step "
            f"{best['step']}) for {patience} evaluations (train.early_stop_evals={patience})")
        return True
    return False
