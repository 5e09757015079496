"""`trmkit bench`: time training steps against the machine's matmul peak, under the planner's
memory budget; the result is assembled in results.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from trmkit import hardware
from trmkit.bench.flops import flops_per_sample, model_gemms
from trmkit.bench.memory import MB, memory_per_slot, peak_rss_bytes, probe_peak_rss
from trmkit.bench.peak import gemm_ceiling, machine_peak, peak_dtypes
from trmkit.bench.results import assemble
from trmkit.bench.session import BenchSession, bench_settings, build_session, resolve, timed_steps
from trmkit.config import Config, ConfigError
from trmkit.hardware.cpu import native_bf16
from trmkit.hardware.report import format_bytes
from trmkit.plan.calibrate import cached_calibration
from trmkit.plan.choose import choose_budget
from trmkit.plan.memory_model import MemoryContext, largest_micro_batch, process_baseline
from trmkit.plan.objects import DTYPES

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    """How long and what run_bench measures (defaults: the `trmkit bench` defaults)."""

    steps: int = 5  # timed training steps
    warmup: int = 2  # untimed steps first (torch.compile compiles here)
    peak_sizes: tuple[int, ...] = (1024, 2048)  # square matmuls of the peak samples
    peak_seconds: float = 0.5  # per size and dtype, per sample (best of 3 reps)
    gemm_seconds: float = 0.15  # per model-shaped GEMM (0 = skip the GEMM ceiling)
    memory: bool = True  # measure MB per slot (a fresh subprocess at B/2, this process at B after its warm-up)
    cache_dir: str | None = None  # the planner's measurement cache (its learned calibration)
    compile_target: str = "net"  # with run.compile=on: "net" (model.net) or "model"
    all_peaks: bool = False  # sample every dtype's matmul peak, even one the CPU only emulates

    def __post_init__(self) -> None:
        if self.steps < 1 or self.warmup < 0:
            raise ConfigError("trmkit bench needs --steps >= 1 and --warmup >= 0")
        if self.compile_target not in ("net", "model"):
            raise ConfigError(f"compile target {self.compile_target!r}: use 'net' or 'model'")


def run_bench(cfg: Config, steps: int = 5, warmup: int = 2, log: Log = print, **options: Any) -> dict[str, Any]:
    """Time `steps` training steps after `warmup` against the machine's matmul peak.

    `options` are the other BenchOptions fields (peak_sizes, peak_seconds,
    gemm_seconds, memory, compile_target). run.threads > 0 sets torch's threads
    for the run (restored after); otherwise torch's current setting is used.
    """
    opts = BenchOptions(steps=steps, warmup=warmup, **options)
    if cfg.run.compile == "on" and warmup < 1:
        raise ConfigError("run.compile=on needs --warmup >= 1: the first step compiles")
    old_threads = torch.get_num_threads()
    if cfg.run.threads > 0:
        torch.set_num_threads(cfg.run.threads)
    try:
        return _run_bench(cfg, opts, log)
    finally:
        torch.set_num_threads(old_threads)


def check_budget(cfg: Config, settings: dict[str, Any], cache_dir: str | None,
                 log: Log) -> dict[str, Any]:
    """The benchmark's steps live under the same ceiling as training: the planner's budget
    (given or default) must hold the planner's estimate of the step at the bench's micro-batch,
    or the bench stops before it starts, naming a micro-batch that fits."""
    hw = hardware.probe()
    chosen = choose_budget(hw, cfg.run, on_gpu=False)
    m, B = resolve(cfg)[0].model, cfg.train.batch_size
    mb, ckpt = settings["micro_batch"], settings["grad_checkpointing"]
    mc = MemoryContext(settings["dtype"], process_baseline(hw), cached_calibration(m, settings["dtype"], cache_dir),
                       cfg.train.ema_decay > 0, chosen.value)
    peak = mc.estimate(m, B, mb, ckpt, eval_batch=1).train_peak
    log(f"bench: budget={format_bytes(chosen.value)} ({chosen.reason}); estimated step peak "
        f"{format_bytes(peak)} at micro-batch {mb}")
    if peak > chosen.value:
        fit = largest_micro_batch(m, B, ckpt, mc)
        fix = f"set train.micro_batch={fit}" if fit else "use a smaller train.batch_size or model"
        raise ConfigError(f"trmkit bench at micro-batch {mb} needs an estimated {format_bytes(peak)}, more than "
                          f"the memory budget of {format_bytes(chosen.value)}: {fix}, or raise --memory-budget")
    return {"budget_bytes": chosen.value, "estimated_peak_bytes": peak}


def _run_bench(cfg: Config, opts: BenchOptions, log: Log) -> dict[str, Any]:
    settings = bench_settings(cfg)
    ceiling_check = check_budget(cfg, settings, opts.cache_dir, log)
    for line in (f"dtype={settings['dtype']} ({settings['dtype_reason']})",
                 f"compile={settings['compile']} ({settings['compile_reason']})",
                 f"threads={settings['threads']} ({settings['threads_reason']})",
                 f"keep_freed_memory={settings['keep_freed_memory']} ({settings['keep_freed_memory_reason']})",
                 f"fused_inference={settings['fused_inference']} ({settings['fused_inference_reason']})"):
        log(f"bench: {line}")
    half = None
    if opts.memory:  # first, so the probe process does not share RAM with this one's batch
        half = memory_probe(cfg, settings, opts, log)
    s = build_session(cfg, settings, opts.compile_target)
    warm = timed_steps(s, opts.warmup, log, "warm-up")
    mem = half(peak_rss_bytes() if opts.warmup else None) if half else None
    dtypes = peak_dtypes(settings["dtype"], native_bf16(hardware.probe().cpu.features), opts.all_peaks)
    log(f"bench: timed steps, each followed by a matmul peak sample (square {opts.peak_sizes} before the first, "
        f"then the fastest of them, {opts.peak_seconds:.1f} s per size, {' and '.join(dtypes)}"
        + ("" if len(dtypes) > 1 else ": this CPU has no native bf16, its peak is not sampled (--all-peaks)") + ")")
    times, peaks = steps_with_peaks(s, opts.steps, opts.peak_sizes, opts.peak_seconds, log, dtypes)
    ceiling = None
    if opts.gemm_seconds > 0:
        log("bench: model-shaped GEMMs")
        ceiling = gemm_ceiling(model_gemms(s.cfg.model, s.cfg.train.batch_size),
                               DTYPES[settings["dtype"]], opts.gemm_seconds)
    result = assemble(s.cfg, settings, flops_per_sample(s.cfg.model), warm, times, peaks, ceiling, mem,
                      opts.compile_target)
    result["memory_budget_mb"] = ceiling_check["budget_bytes"] / MB
    result["estimated_peak_mb"] = ceiling_check["estimated_peak_bytes"] / MB
    return result


def memory_probe(cfg: Config, settings: dict, opts: BenchOptions, log: Log) -> Callable[[int | None], dict]:
    """MB per slot (bench/memory.py): the fresh process at B/2 runs now; the peak at B is this
    process's after its warm-up (given to the returned function), or a fresh one's without a warm-up."""
    big = max(2, cfg.train.batch_size)
    where = "this process after its warm-up" if opts.warmup else "a fresh process"
    log(f"bench: memory probe (a fresh process at batch {big // 2}, {where} at {big})")
    resolved = resolve(cfg)[0]
    small = probe_peak_rss(resolved, big // 2, settings["threads"], steps=1, compile_target=opts.compile_target)
    return lambda peak_big: memory_per_slot(resolved, settings["threads"], opts.compile_target,
                                            peak_at_batch=peak_big, peak_at_half=small)


def steps_with_peaks(s: BenchSession, steps: int, peak_sizes: tuple[int, ...], peak_seconds: float,
                     log: Log, dtypes: tuple[str, ...]) -> tuple[list[float], list[dict[str, float]]]:
    """Timed steps with a matmul-peak sample before the first step and after each one.

    More samples make it likelier that one lands in a quiet moment of a shared
    machine; the samples around each step also give that step's own ratio. The
    first sample tries every size; the later ones only the size that was fastest
    for each dtype there (half the sampling time with two sizes).
    """
    first = {size: machine_peak((size,), peak_seconds, dtypes) for size in peak_sizes}
    best = {dt: max(peak_sizes, key=lambda size: first[size][dt]) for dt in dtypes}
    peaks = [{dt: first[best[dt]][dt] for dt in dtypes}]
    times: list[float] = []
    for i in range(steps):
        times += timed_steps(s, 1)
        peaks.append({dt: machine_peak((best[dt],), peak_seconds, (dt,))[dt] for dt in dtypes})
        log(f"step {i + 1}/{steps}: {times[-1]:.3f} s (peak "
            + ", ".join(f"{dt} {peaks[-1][dt]:.1f}" for dt in dtypes) + " GFLOP/s)")
    return times, peaks
