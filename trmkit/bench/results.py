"""A bench result: assembled from the measurements, printed for people, compared with a
baseline, saved and loaded as JSON.

Speed on a shared, noisy CPU is reported as ratios measured in the same run:
MFU = the training step's matmul FLOP/s / the machine's own GEMM peak (square
torch.matmul, same process, same threads). A peak sample is taken before the
first timed step and after each one, so every step has its own ratio to the
peak samples on either side of it (mfu_steps), taken under the same load.
The headline MFU is the median of those ratios (a median resists
the odd slow step; pairing each step with its neighbouring peak cancels most of
a shared machine's slow-downs). Also reported: mfu_best = (FLOPs per step /
fastest step) / best peak sample (load only ever adds time, so these two are
the estimates closest to a quiet machine) and the median step's throughput
(achieved_gflops, samples_per_s); on a quiet machine they agree, on a busy
one the spread between them shows how busy it was.
The release check `compare` looks at MFU and MB per batch slot, never at
absolute times.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trmkit.bench.flops import FlopCount
from trmkit.bench.memory import MB, peak_rss_bytes
from trmkit.config import Config, ConfigError
from trmkit.files import UnsafeTargetError, check_overwrite, write_json

BENCH_FORMAT = 2  # bump when the meaning of a key changes; compare() refuses other versions


def spread(times: list[float]) -> dict[str, float]:
    """Median, min, max and quartiles of step times (seconds)."""
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return {"median": float(med), "min": min(times), "max": max(times), "q1": float(q1), "q3": float(q3),
            "n": len(times)}


def comparable(cfg: Config, settings: dict[str, Any]) -> dict[str, Any]:
    """What must match for two results to be compared: model, batch and how the step runs."""
    return {"model": asdict(cfg.model), "batch_size": cfg.train.batch_size,
            "micro_batch": settings["micro_batch"], "dtype": settings["dtype"],
            "compile": settings["compile"], "grad_checkpointing": settings["grad_checkpointing"],
            "optimizer": cfg.train.optimizer, "ema": cfg.train.ema_decay > 0}


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
    best_peak = {dt: max(p[dt] for p in peaks) for dt in peaks[0]}  # the dtypes that were sampled
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
        "mfu_best_float32": best_gflops / best_peak["float32"] if "float32" in best_peak else None,
        "mfu_best_bfloat16": best_gflops / best_peak["bfloat16"] if "bfloat16" in best_peak else None,
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
        f"matmul peak (best of {len(r['peak_samples'])} samples): "
        + ", ".join(f"{dt} {v:.1f} GFLOP/s" for dt, v in pk.items()),
        f"MFU {r['mfu']:.3f} vs the {c['dtype']} peak: median of each step against the peak sampled "
        f"around it (range {min(r['mfu_steps']):.3f}-{max(r['mfu_steps']):.3f})",
        f"achieved: {r['achieved_gflops']:.1f} GFLOP/s at the median step, {r['achieved_gflops_best']:.1f} "
        f"at the fastest; fastest step vs best peak: {r['mfu_best']:.3f}"
        + "".join(f", vs {dt} {r[f'mfu_best_{dt}']:.3f}" for dt in pk if dt != c["dtype"]),
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
    """Write a result as JSON (atomically, through trmkit.files)."""
    write_json(path, result, indent=2)


def check_save(path: str | Path, force: bool) -> None:
    """Before the run: --save may replace an earlier saved result (bench_format and comparable in it), an
    other file only with --force (files.check_overwrite)."""
    def saved_result(p: Path) -> bool:
        try:
            return {"bench_format", "comparable"} <= set(json.loads(p.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return False

    try:
        check_overwrite(path, force, saved_result, "--save", "a benchmark result")
    except UnsafeTargetError as err:
        raise ConfigError(str(err)) from err


def load_result(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"baseline {path} not found: write one with `trmkit bench CONFIG --save {path}`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise ConfigError(f"baseline {path} is damaged ({type(err).__name__}): write it again with "
                          f"`trmkit bench CONFIG --save {path}`") from err
