"""The end of a run: the evaluation weights, the summary, and the memory each phase used.

Rank 0 writes RUN_DIR/weights.safetensors (EMA when on) and RUN_DIR/summary.json and prints
the summary; the other processes only stop their meters. `memory_summary` compares each phase's
peak with the plan's estimate, and the calibration cache learns where the estimate was low.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from trmkit import files, monitor, rundir
from trmkit.model.trm import TRM
from trmkit.plan.calibrate import learn_from_peaks
from trmkit.train import distributed as dist_mod
from trmkit.train.evaluate import format_eval
from trmkit.train.optim import EMA, ema_weights
from trmkit.train.session import Clock, Session

Log = Callable[[str], None]


def finish(s: Session, clock: Clock, evals: dict, resumed: int | None, log: Log, ended: str = "max_steps") -> dict:
    """Every process calls it after the loop; rank 0 saves the weights and writes the summary (with why the
    steps ended: "max_steps", "max_minutes", "early_stop" or "hooks")."""
    world, meter = s.run.world, s.run.meter
    peaks = dist_mod.gather_object(meter.process_peak(), world) if world.active else None
    if not world.main:
        meter.stop()
        return {"steps": s.state.step, "rank": world.rank}
    with meter.phase("save"):
        save_weights(s.model, s.opts.ema, Path(s.cfg.run.dir))
    with meter.phase("summary"):
        summary = write_summary(s, clock, evals, resumed, log, peaks, ended)
    meter.stop()  # the kernel's mark still answers process_peak()
    return summary


def save_weights(model: TRM, ema: EMA | None, run_dir: Path) -> Path:
    """The evaluation weights (EMA when on) and buffers, atomically."""
    from safetensors.torch import save

    with ema_weights(model, ema):
        tensors = {k: v.detach().clone().cpu() for k, v in model.state_dict().items()}  # copies
    path = rundir.path(run_dir, rundir.WEIGHTS)
    files.atomic_write(path, save(tensors))
    return path


def write_summary(s: Session, clock: Clock, evals: dict, resumed: int | None, log: Log,
                  rank_peaks: list[int] | None = None, ended: str = "max_steps") -> dict:
    """RUN_DIR/summary.json: the run's facts, its metrics' history, the final evaluation; printed too.
    "ended" and "limits" (max_steps, max_minutes) say whether a resume has anything left to train
    (train/resume.py nothing_to_train)."""
    run_dir, plan, run = Path(s.cfg.run.dir), s.run.plan, s.run
    history = monitor.read_metrics(rundir.path(run_dir, rundir.METRICS))
    facts = monitor.RunFacts(
        device=str(plan.device.value), cores=int(plan.threads.value), threads=int(plan.threads.value),
        peak_rss_gb=run.meter.process_peak() / 2**30, final_metrics=evals, train_seconds=clock.train_seconds(),
        eval_seconds=clock.eval_seconds, wall_seconds=time.perf_counter() - clock.start,
        samples_seen=clock.samples, throughput_warnings=clock.warnings,
        memory_budget_gb=(int(plan.budget.value) / 2**30) if plan.budget.value else None,
        guard_adjustments=[a["message"] for a in run.guard.adjustments] if run.guard else [],
    )
    summary = monitor.summarize(history, facts)
    summary.update({k: v for k, v in evals.items()})
    summary["samples_per_second_stats"] = summary.pop("samples_per_second")
    summary.update(steps=s.state.step, samples_per_second=clock.samples / max(clock.train_seconds(), 1e-9),
                   wall_seconds=facts.wall_seconds, parameters=s.model.num_parameters(),
                   resumed_from_step=resumed, plan=plan.to_dict(),
                   memory_guard=run.guard.adjustments if run.guard else "off",
                   memory=memory_summary(s, log), ended=ended,
                   limits={"max_steps": s.cfg.train.max_steps, "max_minutes": s.cfg.train.max_minutes})
    if rank_peaks is not None:  # every process's peak RSS, as the kernel saw it
        summary.update(world_size=run.world.size, peak_rss_gb_per_rank=[round(p / 2**30, 3) for p in rank_peaks])
        log(f"distributed: {run.world.size} processes, peak RSS per rank "
            + ", ".join(f"{p / 2**30:.2f} GB" for p in rank_peaks))
    path = files.write_json(rundir.path(run_dir, rundir.SUMMARY), summary)
    log(monitor.format_summary(summary, final_line=False))  # one final: line, the next
    log("final: " + format_eval(evals) + f" | {summary['samples_per_second']:.1f} samples/s, "
        f"{summary['wall_seconds']:.0f} s -> {path}")
    return summary


def memory_summary(s: Session, log: Log = print) -> dict:
    """Per-phase peaks against the plan's estimates; the calibration cache learns where one was low.

    A phase is charged only for what it added: with freed memory kept in the process, an
    evaluation that starts at the training step's resident memory and needs less stays there."""
    meter, plan = s.run.meter, s.run.plan
    report = meter.report()
    est = plan.estimate
    if est is None or not plan.is_cpu:
        return {"phases": report}
    step_est = est.train_peak - (est.micro_batch - s.ctx.micro_batch) * est.micro_per_slot
    estimates = {"train step": step_est, "eval": est.eval_peak, "process": max(step_est, est.eval_peak)}
    checks, deficits = {}, {}
    for name, estimate in estimates.items():
        phase = meter.phases.get(name)
        peak, start = (phase.peak, phase.start) if phase else (meter.process_peak(), 0)
        if name != "process" and phase is None:
            continue
        checks[name] = {"estimate_gb": round(estimate / 2**30, 3), "peak_gb": round(peak / 2**30, 3),
                        "error": round(peak / estimate - 1, 3), "resident_at_start_gb": round(start / 2**30, 3)}
        deficits[name] = peak - max(estimate, start)
    learned = learn_from_peaks(s.cfg.model, str(plan.dtype.value), s.run.cache_dir, deficits,
                               source=f"run {s.cfg.run.dir}")
    for name in ("train step", "eval"):
        if deficits.get(name, 0) > 2**20:
            c = checks[name]
            log(f"memory: {name} rose {deficits[name] / 2**20:.0f} MiB above both the plan's estimate "
                f"({c['estimate_gb']:.2f} GiB) and what was resident when it began ({c['resident_at_start_gb']:.2f} "
                f"GiB), to {c['peak_gb']:.2f} GiB" + ("; the calibration cache learned it, the next run plans for it"
                                                      if learned else ""))
    return {"phases": report, "estimate_check": checks, "calibration_learned": learned}
