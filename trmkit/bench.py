"""Benchmark one TRM training step: analytic FLOPs, the machine's matmul peak, MFU, memory per slot.

Speed on a shared, noisy CPU is reported as ratios measured in the same run:
MFU = the training step's matmul FLOP/s / the machine's own GEMM peak (square
torch.matmul, same process, same threads). A peak sample is taken before the
first timed step and after each one, so every step has its own ratio to the
peak samples on either side of it (mfu_steps), taken under the same load.
The headline MFU is the median of those ratios (the issue asks for the
bench's median; pairing each step with its neighbouring peak cancels most of
a shared machine's slow-downs). Also reported: mfu_best = (FLOPs per step /
fastest step) / best peak sample (load only ever adds time, so these two are
the estimates closest to a quiet machine) and the median step's throughput
(achieved_gflops, samples_per_s); on a quiet machine they agree, on a busy
one the spread between them shows how busy it was.
The release check `compare` looks at MFU and MB per batch slot, never at
absolute times.

FLOP count, per sample and per supervision step (one training step updates
every slot by one supervision step). Matmul FLOPs only: an (m,k)x(k,n)
product costs 2*m*n*k; norms, activations, softmax, the loss, embedding
lookups and the optimizer are not counted.

    S = puzzle_emb_len + seq_len, L = seq_len, D = hidden_size, V = vocab_size,
    w(d) = swiglu_width(d, expansion)  (layers.py: expansion*2/3*d rounded up to 256)
    SwiGLU over t rows of d features: gate 2*t*d*w + up 2*t*d*w + down 2*t*w*d = 6*t*d*w(d)
    one call of the shared network, per layer:
        mlp_t:     6*D*S*w(S)    sequence mixer (D rows of S features, transposed)
                 + 6*S*D*w(D)    channel SwiGLU
        attention: 2*S*D*3D (qkv) + 2*S*S*D (scores) + 2*S*S*D (values) + 2*S*D*D (out)
                 + 6*S*D*w(D)
    calls: T*(n+1) = H_cycles*(L_cycles+1); the first (T-1)*(n+1) run without
    gradients (forward only), the last n+1 run forward + backward, and
    backward = 2 x forward (gradients of inputs and of weights)
    heads: lm_head 2*L*D*V + q head 2*D*2, forward + backward = 3x
    total = L_layers*call * ((T-1)*(n+1) + 3*(n+1)) + 3*heads

The paper's Sudoku config (mlp_t, D=512, 2 layers, T=3, n=6, S=16+81=97,
V=11) gives 42.72 GFLOP, the ~42.7 quoted for it. These are model FLOPs:
gradient checkpointing recomputes the gradient cycle's forward (n+1 more
calls), which is not counted, so MFU falls when it is on. The count equals
torch.utils.flop_counter.FlopCounterMode on a real forward + backward
(tests/test_bench.py; on the CPU that counter skips scaled_dot_product_attention).

Memory per slot: peak RSS of two fresh subprocesses (two training steps at
batch B/2 and at B, same config and threads; the second step runs with the
optimizer state allocated) -> (peak_B - peak_B/2) / (B/2).
Fresh processes because a process's peak RSS cannot be reset portably and
the allocator keeps freed pages; the fixed part (torch, weights, optimizer
state) is the same in both and cancels.

Departures from the style guide, and why: the bench names the float32 and
bfloat16 dtypes itself (it measures both peaks whatever the run uses), builds
its own autocast from run.dtype instead of the planner's, and runs on the
CPU only (the peak it divides by is the CPU's).
"""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trmkit.config import Config, ConfigError, ModelConfig, from_dict
from trmkit import hardware
from trmkit.memory import kernel_peak
from trmkit.hardware import format_bytes, keep_freed_memory, probe_platform
from trmkit.plan import (CPU, DTYPES, MemoryContext, autocast_factory, cached_calibration, choose_budget,
                         choose_fused_inference, choose_keep_freed_memory, largest_micro_batch, process_baseline)
from trmkit.data.store import Batch, SampleStream
from trmkit.model.layers import swiglu_width
from trmkit.model.trm import TRM
from trmkit.train.loop import build_optimizers, fill_from_meta, open_splits
from trmkit.train.step import Optimizers, StepContext, TrainState, new_state, train_step

Log = Callable[[str], None]
BENCH_FORMAT = 2  # bump when the meaning of a key changes; compare() refuses other versions
MB = 1024 * 1024


# ----------------------------------------------------------------------------- FLOP count

@dataclass(frozen=True)
class FlopCount:
    """Matmul FLOPs of one training supervision step, per sample."""

    per_call: int  # one call of the shared network (all L_layers), forward
    calls_no_grad: int  # (T-1)*(n+1), forward only
    calls_grad: int  # n+1, forward + backward
    heads: int  # lm_head + q head, forward
    total: int  # per_call*(calls_no_grad + 3*calls_grad) + 3*heads


def swiglu_flops(rows: int, d: int, width: int) -> int:
    """gate and up (rows,d)x(d,w) each + down (rows,w)x(w,d) = 6*rows*d*w."""
    return 2 * rows * d * 2 * width + 2 * rows * width * d


def layer_flops(cfg: ModelConfig) -> int:
    """Forward FLOPs of one block for one sample (see the module docstring)."""
    S, D = cfg.puzzle_emb_len + cfg.seq_len, cfg.hidden_size
    channel = swiglu_flops(S, D, swiglu_width(D, cfg.expansion))
    if cfg.mixer == "mlp_t":
        mixer = swiglu_flops(D, S, swiglu_width(S, cfg.expansion))  # (B*D, S) rows after transpose
    else:
        mixer = 2 * S * D * 3 * D + 2 * S * S * D + 2 * S * S * D + 2 * S * D * D
    return mixer + channel


def flops_per_sample(cfg: ModelConfig) -> FlopCount:
    """Matmul FLOPs of one supervision step (forward + backward) for one sample."""
    if cfg.seq_len < 1 or cfg.vocab_size < 1:
        raise ConfigError("model.seq_len and model.vocab_size must be set to count FLOPs")
    per_call = cfg.L_layers * layer_flops(cfg)
    per_cycle = cfg.L_cycles + 1
    no_grad, grad = (cfg.H_cycles - 1) * per_cycle, per_cycle
    positions, width = (1, cfg.num_classes) if cfg.num_classes else (cfg.seq_len, cfg.vocab_size)
    heads = 2 * positions * cfg.hidden_size * width + 2 * cfg.hidden_size * 2
    total = per_call * (no_grad + 3 * grad) + 3 * heads
    return FlopCount(per_call=per_call, calls_no_grad=no_grad, calls_grad=grad, heads=heads, total=total)


# ----------------------------------------------------------------------------- matmul peak

@dataclass(frozen=True)
class Gemm:
    """One matmul shape (m,k)x(k,n) and how often a training step runs it."""

    name: str
    m: int
    k: int
    n: int
    count: int

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, seconds: float = 1.0,
                  reps: int = 3, transpose_a: bool = False) -> float:
    """Best-of-`reps` GFLOP/s of (m,k)x(k,n) torch.matmul, each rep ~seconds/reps long.

    transpose_a multiplies a transposed view, as autograd does for weight gradients.
    """
    a = torch.randn(k, m).to(dtype).t() if transpose_a else torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    out = torch.empty(m, n, dtype=dtype)
    torch.matmul(a, b, out=out)  # warm-up: the first call picks and loads kernels
    best = 0.0
    for _ in range(reps):
        count, start = 0, time.perf_counter()
        while True:
            torch.matmul(a, b, out=out)
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds / reps:
                break
        best = max(best, 2 * m * k * n * count / elapsed / 1e9)
    return best


def machine_peak(sizes: tuple[int, ...] = (1024, 2048), seconds: float = 1.0) -> dict[str, float]:
    """GFLOP/s per dtype: the best square torch.matmul over `sizes`, with torch's threads."""
    return {name: max(matmul_gflops(s, s, s, dt, seconds) for s in sizes) for name, dt in DTYPES.items()}


def model_gemms(cfg: ModelConfig, batch: int) -> list[Gemm]:
    """The Linear-layer matmuls of one training step at `batch` slots (forward, dX, dW).

    Attention scores/values and the heads are left out: they are < 1% of the
    FLOPs for mlp_t and small for attention at S ~ 100.
    """
    S, D, e = cfg.puzzle_emb_len + cfg.seq_len, cfg.hidden_size, cfg.expansion
    fc = flops_per_sample(cfg)
    fwd, bwd = cfg.L_layers * (fc.calls_no_grad + fc.calls_grad), cfg.L_layers * fc.calls_grad
    wd = swiglu_width(D, e)
    linears = [("mlp.gate", batch * S, D, wd), ("mlp.up", batch * S, D, wd), ("mlp.down", batch * S, wd, D)]
    if cfg.mixer == "mlp_t":
        ws = swiglu_width(S, e)
        linears += [("mix.gate", batch * D, S, ws), ("mix.up", batch * D, S, ws),
                    ("mix.down", batch * D, ws, S)]
    else:
        linears += [("attn.qkv", batch * S, D, 3 * D), ("attn.out", batch * S, D, D)]
    gemms = []
    for name, m, k, n in linears:
        gemms += [Gemm(f"{name} fwd", m, k, n, fwd), Gemm(f"{name} dX", m, n, k, bwd),
                  Gemm(f"{name} dW", k, m, n, bwd)]
    return gemms


def gemm_ceiling(gemms: list[Gemm], dtype: torch.dtype, seconds: float = 0.3) -> dict[str, Any]:
    """Time each model-shaped matmul; the step's time if it did nothing but these GEMMs."""
    rates, gemm_seconds, flops = {}, 0.0, 0
    for g in gemms:
        rate = matmul_gflops(g.m, g.k, g.n, dtype, seconds, reps=2, transpose_a=g.name.endswith("dW"))
        rates[f"{g.name} ({g.m}x{g.k})x({g.k}x{g.n})"] = round(rate, 1)
        gemm_seconds += g.count * g.flops / (rate * 1e9)
        flops += g.count * g.flops
    return {"gflops": flops / gemm_seconds / 1e9, "seconds_per_step": gemm_seconds, "shapes": rates}


# ----------------------------------------------------------------------------- the step

class SyntheticStream:
    """Random samples shaped like the dataset: tokens in [1, V), labels in [1, V)."""

    def __init__(self, vocab_size: int, seq_len: int, num_puzzle_ids: int, seed: int, num_classes: int = 0):
        self.vocab_size, self.seq_len, self.num_ids = vocab_size, seq_len, num_puzzle_ids
        self.num_classes = num_classes  # a classifier's labels are class ids in [0, C)
        self.rng = np.random.default_rng(seed)

    def take(self, k: int) -> Batch:
        high = max(2, self.vocab_size)
        token = np.uint8 if high <= 256 else np.int64  # as the store keeps them
        labels = self.rng.integers(1, high, (k, self.seq_len))
        if self.num_classes:
            labels %= self.num_classes
        return Batch(inputs=self.rng.integers(1, high, (k, self.seq_len)).astype(token),  # (k, L)
                     labels=labels.astype(token),  # (k, L)
                     puzzle_ids=self.rng.integers(0, self.num_ids, (k,)))  # (k,)


@dataclass
class BenchSession:
    cfg: Config
    model: TRM
    opts: Optimizers
    state: TrainState
    stream: Any
    ctx: StepContext


def resolve(cfg: Config) -> tuple[Config, Any, int]:
    """(cfg with model fields filled, sample stream, ignore_label_id): the store's, or synthetic."""
    if cfg.data.path:
        train_split, _ = open_splits(cfg)
        cfg = fill_from_meta(cfg, train_split)
        return cfg, SampleStream(train_split, cfg.run.seed), train_split.meta.ignore_label_id
    m = cfg.model
    if m.vocab_size < 1 or m.seq_len < 1 or m.num_puzzle_ids < 1:
        raise ConfigError("trmkit bench needs data.path=DIR or model.vocab_size, model.seq_len and "
                          "model.num_puzzle_ids (e.g. 11, 81, 1 for Sudoku) for synthetic samples")
    return cfg, SyntheticStream(m.vocab_size, m.seq_len, m.num_puzzle_ids, cfg.run.seed, m.num_classes), -1


def autocast_for(dtype: str) -> Callable[[], contextlib.AbstractContextManager]:
    return autocast_factory(CPU, dtype)


def bench_settings(cfg: Config) -> dict[str, Any]:
    """dtype, micro-batch, compile and checkpointing as the bench runs them, with reasons."""
    if cfg.run.device not in ("auto", CPU):
        raise ConfigError("trmkit bench measures the CPU: set run.device=cpu or auto")
    dtype = cfg.run.dtype if cfg.run.dtype in DTYPES else "float32"
    keep, _ = choose_keep_freed_memory(cfg.run.keep_freed_memory, probe_platform().libc, CPU)
    fused = choose_fused_inference(cfg.run.fused_inference, CPU, dtype, cfg.run.compile == "on")
    return {
        "dtype": dtype,
        "dtype_reason": "run.dtype" if cfg.run.dtype in DTYPES else "run.dtype=auto -> float32 (CPU default)",
        "micro_batch": cfg.train.micro_batch or cfg.train.batch_size,
        "compile": cfg.run.compile == "on",
        "compile_reason": ("run.compile" if cfg.run.compile != "auto"
                           else "run.compile=auto -> off (set on to time it)"),
        "grad_checkpointing": cfg.run.grad_checkpointing == "on",
        "threads": torch.get_num_threads(),
        "threads_reason": "run.threads" if cfg.run.threads > 0 else "torch's current setting (run.threads=0)",
        "keep_freed_memory": keep.value,
        "keep_freed_memory_reason": keep.reason,
        "fused_inference": fused.value,
        "fused_inference_reason": fused.reason,
    }


def build_session(cfg: Config, settings: dict[str, Any], compile_target: str = "net") -> BenchSession:
    """Model, optimizers and slot state as the training loop builds them, on the CPU."""
    cfg, stream, ignore = resolve(cfg)
    torch.manual_seed(cfg.run.seed)
    device = torch.device(CPU)
    if settings["keep_freed_memory"]:
        keep_freed_memory()  # as the training loop does (plan.apply_to_process)
    model = TRM(cfg.model).to(device)
    model.grad_checkpointing = settings["grad_checkpointing"]
    model.net.fused_inference = settings["fused_inference"]
    if settings["compile"]:
        (model.net if compile_target == "net" else model).compile()  # in place: parameter names unchanged
    ctx = StepContext(micro_batch=settings["micro_batch"], ignore_label_id=ignore, device=device,
                      autocast=autocast_for(settings["dtype"]))
    state = new_state(model, cfg.train.batch_size, cfg.model.seq_len, device)
    return BenchSession(cfg, model, build_optimizers(model, cfg), state, stream, ctx)


def timed_steps(s: BenchSession, n: int, log: Log | None = None, label: str = "step") -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        train_step(s.model, s.state, s.stream, s.opts, s.cfg.train, s.ctx)
        times.append(time.perf_counter() - start)
        if log:
            log(f"{label} {i + 1}/{n}: {times[-1]:.3f} s")
    return times


def spread(times: list[float]) -> dict[str, float]:
    """Median, min, max and quartiles of step times (seconds)."""
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return {"median": float(med), "min": min(times), "max": max(times), "q1": float(q1), "q3": float(q3),
            "n": len(times)}


# ----------------------------------------------------------------------------- memory

def peak_rss_bytes() -> int:
    """This process's own peak resident set size so far (VmHWM on Linux; see memory.kernel_peak)."""
    return int(kernel_peak() or 0)


def memory_probe_child() -> None:
    """Subprocess entry: read {config, threads, steps} from stdin, train, print peak RSS as JSON."""
    job = json.loads(sys.stdin.read())
    torch.set_num_threads(int(job["threads"]))
    cfg = from_dict(job["config"], where="bench memory probe")
    s = build_session(cfg, bench_settings(cfg), job.get("compile_target", "net"))
    timed_steps(s, int(job["steps"]))
    print(json.dumps({"peak_rss_bytes": peak_rss_bytes(), "batch": cfg.train.batch_size}))


def probe_peak_rss(cfg: Config, batch: int, threads: int, steps: int = 1,
                   compile_target: str = "net", timeout: float = 3600) -> int:
    """Peak RSS (bytes) of a fresh process that trains `steps` steps at `batch` slots."""
    raw = cfg.to_dict()
    raw["train"]["batch_size"] = batch
    if raw["train"]["micro_batch"] and batch % raw["train"]["micro_batch"]:
        raw["train"]["micro_batch"] = 0
    job = json.dumps({"config": raw, "threads": threads, "steps": steps, "compile_target": compile_target})
    code = "from trmkit.bench import memory_probe_child; memory_probe_child()"
    done = subprocess.run([sys.executable, "-c", code], input=job, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe at batch {batch} failed:\n{done.stderr[-2000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_bytes"])


def per_slot_mb(peak_small: int, peak_big: int, small: int, big: int) -> float:
    """(peak RSS at big - at small) / (big - small) slots, in MiB."""
    if big <= small:
        raise ValueError(f"need two different batch sizes, got {small} and {big}")
    return (peak_big - peak_small) / (big - small) / MB


def memory_per_slot(cfg: Config, threads: int, compile_target: str = "net") -> dict[str, Any]:
    """MB per batch slot from fresh processes at B/2 and B slots (B at least 2)."""
    big = max(2, cfg.train.batch_size)
    small = big // 2
    # two steps: the second runs backward with the optimizer's state already allocated
    peaks = {b: probe_peak_rss(cfg, b, threads, steps=2, compile_target=compile_target) for b in (small, big)}
    return {"batches": [small, big], "peak_rss_mb": [peaks[small] / MB, peaks[big] / MB],
            "mb_per_slot": per_slot_mb(peaks[small], peaks[big], small, big),
            "method": "peak RSS of fresh processes, two steps each: (peak_B - peak_B/2) / (B/2)"}


# ----------------------------------------------------------------------------- run_bench

def comparable(cfg: Config, settings: dict[str, Any]) -> dict[str, Any]:
    """What must match for two results to be compared: model, batch and how the step runs."""
    return {"model": asdict(cfg.model), "batch_size": cfg.train.batch_size,
            "micro_batch": settings["micro_batch"], "dtype": settings["dtype"],
            "compile": settings["compile"], "grad_checkpointing": settings["grad_checkpointing"],
            "optimizer": cfg.train.optimizer, "ema": cfg.train.ema_decay > 0}


@dataclass(frozen=True)
class BenchOptions:
    """How long and what run_bench measures (defaults: the `trmkit bench` defaults)."""

    steps: int = 5  # timed training steps
    warmup: int = 2  # untimed steps first (torch.compile compiles here)
    peak_sizes: tuple[int, ...] = (1024, 2048)  # square matmuls of the peak samples
    peak_seconds: float = 0.5  # per size and dtype, per sample (best of 3 reps)
    gemm_seconds: float = 0.3  # per model-shaped GEMM (0 = skip the GEMM ceiling)
    memory: bool = True  # measure MB per slot in two fresh subprocesses
    budget: int | None = None  # bytes (--memory-budget); None: the planner's default budget
    cache_dir: str | None = None  # the planner's measurement cache (its learned calibration)
    compile_target: str = "net"  # with run.compile=on: "net" (model.net) or "model"

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


def check_budget(cfg: Config, settings: dict[str, Any], budget: int | None, cache_dir: str | None,
                 log: Log) -> dict[str, Any]:
    """The benchmark's steps live under the same ceiling as training: the planner's budget
    (given or default) must hold the planner's estimate of the step at the bench's micro-batch,
    or the bench stops before it starts, naming a micro-batch that fits."""
    hw = hardware.probe()
    chosen = choose_budget(hw, cfg.run.memory_budget, budget, on_gpu=False)
    m, B, mb, ckpt = resolve(cfg)[0].model, cfg.train.batch_size, settings["micro_batch"], settings["grad_checkpointing"]
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
    ceiling_check = check_budget(cfg, settings, opts.budget, opts.cache_dir, log)
    for line in (f"dtype={settings['dtype']} ({settings['dtype_reason']})",
                 f"compile={settings['compile']} ({settings['compile_reason']})",
                 f"threads={settings['threads']} ({settings['threads_reason']})",
                 f"keep_freed_memory={settings['keep_freed_memory']} ({settings['keep_freed_memory_reason']})",
                 f"fused_inference={settings['fused_inference']} ({settings['fused_inference_reason']})"):
        log(f"bench: {line}")
    mem = None
    if opts.memory:  # first, so the probe processes do not share RAM with this one's batch
        log(f"bench: memory probe (fresh processes at batch {max(2, cfg.train.batch_size) // 2} "
            f"and {max(2, cfg.train.batch_size)})")
        mem = memory_per_slot(resolve(cfg)[0], settings["threads"], opts.compile_target)
    s = build_session(cfg, settings, opts.compile_target)
    warm = timed_steps(s, opts.warmup, log, "warm-up")
    log(f"bench: timed steps, each followed by a matmul peak sample (square {opts.peak_sizes}, "
        f"{opts.peak_seconds:.1f} s per size and dtype)")
    times, peaks = steps_with_peaks(s, opts.steps, opts.peak_sizes, opts.peak_seconds, log)
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


def steps_with_peaks(s: BenchSession, steps: int, peak_sizes: tuple[int, ...], peak_seconds: float,
                     log: Log) -> tuple[list[float], list[dict[str, float]]]:
    """Timed steps with a matmul-peak sample before the first step and after each one.

    More samples make it likelier that one lands in a quiet moment of a shared
    machine; the samples around each step also give that step's own ratio.
    """
    peaks = [machine_peak(peak_sizes, peak_seconds)]
    times: list[float] = []
    for i in range(steps):
        times += timed_steps(s, 1)
        peaks.append(machine_peak(peak_sizes, peak_seconds))
        log(f"step {i + 1}/{steps}: {times[-1]:.3f} s (peak float32 {peaks[-1]['float32']:.1f}, "
            f"bfloat16 {peaks[-1]['bfloat16']:.1f} GFLOP/s)")
    return times, peaks


def paired_mfu(flops_per_step: int, times: list[float], peaks: list[dict[str, float]], dtype: str) -> list[float]:
    """MFU of each step against the mean of the peak samples just before and just after it."""
    return [flops_per_step / t / 1e9 / ((before[dtype] + after[dtype]) / 2)
            for t, before, after in zip(times, peaks, peaks[1:])]


def assemble(cfg: Config, settings: dict[str, Any], fc: FlopCount, warm: list[float], times: list[float],
             peaks: list[dict[str, float]], ceiling: dict[str, Any] | None, mem: dict[str, Any] | None,
             compile_target: str) -> dict[str, Any]:
    """The result dict (JSON-ready) from the measurements; see the module docstring for MFU."""
    B, dtype = cfg.train.batch_size, settings["dtype"]
    st = spread(times)
    flops_step = fc.total * B
    best_peak = {dt: max(p[dt] for p in peaks) for dt in DTYPES}
    best_gflops = flops_step / st["min"] / 1e9
    paired = paired_mfu(flops_step, times, peaks, dtype)
    return {
        "bench_format": BENCH_FORMAT,
        "comparable": comparable(cfg, settings),
        "settings": {**settings, "compile_target": compile_target if settings["compile"] else None},
        "machine": {"torch": torch.__version__, "arch": platform.machine(), "threads": settings["threads"]},
        "flops_per_sample": fc.total,
        "flops_per_step": flops_step,
        "flop_count": asdict(fc),
        "s_per_step": st,
        "warmup_s": warm,
        "samples_per_s": B / st["median"],
        "samples_per_s_best": B / st["min"],
        "achieved_gflops": flops_step / st["median"] / 1e9,
        "achieved_gflops_best": best_gflops,
        "peak_gflops": best_peak,
        "peak_samples": peaks,
        "mfu": float(np.median(paired)),
        "mfu_steps": paired,
        "mfu_best": best_gflops / best_peak[dtype],
        "mfu_best_float32": best_gflops / best_peak["float32"],
        "mfu_best_bfloat16": best_gflops / best_peak["bfloat16"],
        "gemm_ceiling": ceiling,
        "gemm_share": ceiling["seconds_per_step"] / st["min"] if ceiling else None,
        "non_gemm_share": max(0.0, 1 - ceiling["seconds_per_step"] / st["min"]) if ceiling else None,
        "peak_rss_mb": peak_rss_bytes() / MB,
        "mb_per_slot": mem["mb_per_slot"] if mem else None,
        "memory": mem,
        "compile_seconds": max(0.0, warm[0] - st["min"]) if settings["compile"] and warm else None,
    }


def format_lines(r: dict[str, Any]) -> list[str]:
    """Human-readable summary of a run_bench result."""
    c, st, pk = r["comparable"], r["s_per_step"], r["peak_gflops"]
    m = c["model"]
    lines = [
        f"config: {m['mixer']} D={m['hidden_size']} layers={m['L_layers']} T={m['H_cycles']} "
        f"n={m['L_cycles']} S={m['puzzle_emb_len'] + m['seq_len']} V={m['vocab_size']} | batch {c['batch_size']} "
        f"(micro {c['micro_batch']}) {c['dtype']} threads={r['settings']['threads']} compile={c['compile']}",
        f"flops: {r['flops_per_sample'] / 1e9:.3f} GFLOP per sample per supervision step, "
        f"{r['flops_per_step'] / 1e9:.1f} GFLOP per step",
        f"speed: {r['samples_per_s']:.2f} samples/s, {st['median']:.3f} s/step "
        f"(min {st['min']:.3f}, IQR {st['q1']:.3f}-{st['q3']:.3f}, max {st['max']:.3f}; {st['n']} steps)",
        f"matmul peak (best of {len(r['peak_samples'])} samples): float32 {pk['float32']:.1f} GFLOP/s, "
        f"bfloat16 {pk['bfloat16']:.1f} GFLOP/s",
        f"MFU {r['mfu']:.3f} vs the {c['dtype']} peak: median of each step against the peak sampled "
        f"around it (range {min(r['mfu_steps']):.3f}-{max(r['mfu_steps']):.3f})",
        f"achieved: {r['achieved_gflops']:.1f} GFLOP/s at the median step, {r['achieved_gflops_best']:.1f} "
        f"at the fastest; fastest step vs best peak: {r['mfu_best']:.3f} (vs float32 "
        f"{r['mfu_best_float32']:.3f}, vs bfloat16 {r['mfu_best_bfloat16']:.3f})",
    ]
    if r["gemm_ceiling"]:
        g = r["gemm_ceiling"]
        lines.append(f"model-shaped GEMMs: {g['gflops']:.1f} GFLOP/s; GEMMs alone would take "
                     f"{g['seconds_per_step']:.3f} s = {r['gemm_share']:.0%} of the fastest step")
        lines.append(f"non-GEMM share: {r['non_gemm_share']:.0%} of the fastest step is not matrix products "
                     "(norms, activations, residual adds, dtype casts, the loss, the optimizer, framework overhead): "
                     "what MFU cannot count, and what a faster matmul would not shorten")
    mem = r["memory"]
    if mem:
        lines.append(f"memory: {mem['mb_per_slot']:.1f} MB per slot (peak RSS {mem['peak_rss_mb'][0]:.0f} MB "
                     f"at batch {mem['batches'][0]}, {mem['peak_rss_mb'][1]:.0f} MB at {mem['batches'][1]})")
    lines.append(f"this process: peak RSS {r['peak_rss_mb']:.0f} MB")
    if r["compile_seconds"] is not None:
        lines.append(f"compile ({r['settings']['compile_target']}): {r['compile_seconds']:.1f} s "
                     f"(first warm-up step minus the fastest step)")
    return lines


# ----------------------------------------------------------------------------- regression check

def compare(current: dict[str, Any], baseline: dict[str, Any],
            tolerance: float = 0.1) -> tuple[bool, list[str]]:
    """Is `current` no worse than `baseline`? Compares MFU (a ratio to each run's own
    matmul peak, so stable across machines and load) and MB per slot, not times.

    Fails when MFU falls by more than `tolerance` (relative), when MB per slot
    rises by more than `tolerance`, or when the two results measure different things.
    """
    if current.get("bench_format") != baseline.get("bench_format"):
        return False, [f"baseline has bench_format {baseline.get('bench_format')}, this trmkit writes "
                       f"{current.get('bench_format')}: re-save the baseline"]
    differ = [k for k in sorted(set(current["comparable"]) | set(baseline["comparable"]))
              if current["comparable"].get(k) != baseline["comparable"].get(k)]
    if differ:
        return False, [f"not comparable: {', '.join(differ)} differ(s) from the baseline"]
    ok, lines = True, []
    for key, worse_if, label in (("mfu", -1, "MFU"), ("mb_per_slot", +1, "MB per slot")):
        cur, base = current.get(key), baseline.get(key)
        if cur is None or base is None or base <= 0:
            lines.append(f"{label}: not measured in both results; skipped")
            continue
        change = cur / base - 1
        bad = worse_if * change > tolerance
        ok = ok and not bad
        lines.append(f"{label}: {cur:.4g} vs baseline {base:.4g} ({change:+.1%}, "
                     f"tolerance {tolerance:.0%}) {'REGRESSION' if bad else 'ok'}")
    return ok, lines


def save_result(result: dict[str, Any], path: str | Path) -> None:
    """Write a result as JSON (temporary file, then rename)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(path)


def load_result(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"baseline {path} not found: write one with `trmkit bench CONFIG --save {path}`")
    return json.loads(path.read_text())
