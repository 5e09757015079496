"""Speed probes: seconds per network call at float32/bf16 and torch.compile's cost and gain.

Each is measured inside `make_plan` only, cached per machine, torch and model shape
(cache.py), and not cached when other processes were busy: a timing taken beside other work
would mislead every later plan.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from trmkit.config import Config, ModelConfig
from trmkit.hardware import HardwareInfo
from trmkit.model.layers import Network, keep_fused_path_eager, rotary_tables
from trmkit.plan.cache import COMPILE_FILE, SPEED_FILE, read_cache, write_cache
from trmkit.plan.memory_model import seq_total
from trmkit.plan.objects import autocast_factory

Log = Callable[[str], None]

BUSY_PERCENT = 25.0  # other processes using more CPU than this make timings unreliable


@contextlib.contextmanager
def _torch_threads(n: int):
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def shape_key(m: ModelConfig) -> str:
    """What the speed of one network call depends on."""
    conv = f" conv{'dense' if m.conv_dense else 'dw'}{m.grid_height}x{m.grid_width}" if m.mixer == "conv" else ""
    return (f"{m.mixer} D{m.hidden_size} S{seq_total(m)} layers{m.L_layers} "
            f"heads{m.num_heads if m.mixer == 'attention' else 0} exp{m.expansion:g}"
            + (f" mlp{m.mlp_width}" if m.mlp_width else "") + conv)


def _bench_net(m: ModelConfig, micro_batch: int, device: str) -> tuple[Network, tuple, Any]:
    S, D = seq_total(m), m.hidden_size
    net = Network(m, S).to(device)
    rope = (m.grid_height, m.grid_width) if m.mixer == "conv" else None  # what the mixer knows of positions
    if m.mixer == "attention":
        rope = tuple(t.to(device) for t in rotary_tables(S, D // m.num_heads, m.rope_theta))
    gen = torch.Generator().manual_seed(0)
    h, inj = (torch.randn(micro_batch, S, D, generator=gen).to(device) for _ in range(2))
    return net, (h, inj), rope


def _best_time(fn: Callable[[], Any], repeats: int, device: str) -> float:
    fn()  # warm-up: kernel selection, first-touch of memory
    best = math.inf
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_speed(m: ModelConfig, micro_batch: int, dtype: str, threads: int,
                  device: str = "cpu", repeats: int = 2) -> dict[str, float]:
    """Seconds for one call of the model's network on `micro_batch` slots at `dtype`:
    'forward' without gradients, 'train' forward + backward (best of `repeats`)."""
    net, (h, inj), rope = _bench_net(m, micro_batch, device)
    autocast = autocast_factory(device, dtype)

    def forward():
        with torch.no_grad(), autocast():
            net(h, inj, rope)

    def train():
        with autocast():
            out = net(h, inj, rope)
        out.float().sum().backward()

    with _torch_threads(threads):
        return {"forward": _best_time(forward, repeats, device), "train": _best_time(train, repeats, device)}


def measure_compile(m: ModelConfig, micro_batch: int, dtype: str, threads: int,
                    device: str = "cpu") -> dict[str, Any]:
    """Compile the network with torch.compile and time it against eager (forward + backward).

    Returns compile_seconds, eager and compiled seconds per call, or an 'error'.
    """
    autocast = autocast_factory(device, dtype)
    net, (h, inj), rope = _bench_net(m, micro_batch, device)

    def run(module):
        with autocast():
            out = module(h, inj, rope)
        out.float().sum().backward()

    with _torch_threads(threads):
        eager = _best_time(lambda: run(net), 3, device)
        try:
            keep_fused_path_eager()
            compiled = torch.compile(net)
            t0 = time.perf_counter()
            run(compiled)
            compile_seconds = time.perf_counter() - t0
            fast = _best_time(lambda: run(compiled), 3, device)
        except Exception as err:  # noqa: BLE001 - any failure means "does not work here"
            return {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
    return {"compile_seconds": compile_seconds, "eager": eager, "compiled": fast}


def others_cpu_percent(seconds: float = 0.3) -> float:
    """System-wide CPU use while this process sleeps: what other processes take."""
    import psutil
    return float(psutil.cpu_percent(interval=seconds))


def step_seconds(m: ModelConfig, speed: dict[str, float], bench_batch: int, batch_size: int,
                 grad_checkpointing: bool) -> float:
    """Wall time of one optimizer step from the measured time of one network call."""
    calls = m.L_cycles + 1
    per_slot = ((m.H_cycles - 1) * calls * speed["forward"] + calls * speed["train"]
                + (calls * speed["forward"] if grad_checkpointing else 0.0)) / bench_batch
    return per_slot * batch_size


def speed_table(cfg: Config, hw: HardwareInfo, threads: int, device: str, dtypes: tuple[str, ...],
                cache_dir: str | Path | None, log: Log) -> tuple[dict[str, dict[str, float]], int]:
    """Measured seconds per network call at each dtype (cached per machine, torch and model shape).

    Returns (table, micro-batch of the measurement)."""
    bench = min(8, cfg.train.batch_size)
    key = f"{hw.cpu.model}|torch {hw.torch.version}|{device}|{threads} threads|{shape_key(cfg.model)}|m{bench}"
    cache = read_cache(cache_dir, SPEED_FILE)
    table = {dt: cache[f"{key}|{dt}"] for dt in dtypes if f"{key}|{dt}" in cache}
    missing = [dt for dt in dtypes if dt not in table]
    if missing:
        log(f"measuring {' vs '.join(missing)} speed on this {device.upper()} for D={cfg.model.hidden_size} "
            "(a few seconds, once per machine and model shape)")
    busy = others_cpu_percent() if missing and device == "cpu" else 0.0
    for _ in range(2):  # alternate the dtypes, keep the best: a load burst hits both alike
        for dt in missing:
            t = measure_speed(cfg.model, bench, dt, threads, device, repeats=1)
            table[dt] = {k: min(v, table.get(dt, t)[k]) for k, v in t.items()}
    for dt in missing:
        table[dt] = {**table[dt], "busy_percent": busy}
        if busy < BUSY_PERCENT:  # timings taken beside other work are not kept
            write_cache(cache_dir, SPEED_FILE, f"{key}|{dt}", table[dt])
    return table, bench


def compile_timing(m: ModelConfig, hw: HardwareInfo, device: str, dtype: str, micro: int, threads: int,
                   cache_dir: str | Path | None, log: Log, run_s: float) -> dict[str, Any]:
    """torch.compile against eager for this model here ({'compile_seconds', 'eager', 'compiled',
    'busy_percent'} or {'error'}): measured once per machine, torch and shape, then cached."""
    bench = min(micro, 8)
    key = f"{hw.cpu.model}|torch {hw.torch.version}|{device}|{threads} threads|{dtype}|{shape_key(m)}|m{bench}"
    result = read_cache(cache_dir, COMPILE_FILE).get(key)
    if result is None:
        log(f"measuring torch.compile for this model (once per machine; the run is ~{minutes(run_s)})")
        busy = others_cpu_percent() if device == "cpu" else 0.0
        result = {**measure_compile(m, bench, dtype, threads, device), "busy_percent": busy}
        if busy < BUSY_PERCENT:
            write_cache(cache_dir, COMPILE_FILE, key, result)
    return result


def minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"
