"""`trmkit rl memory`: what each switch of the memory plan saves on one TR-RPG round of an LM policy.

The memory model (rl/lm/memory.py) estimates the round's peak term by term for the naive update (full
fine-tune in float32, a reference copy, whole-batch logits over every position, no checkpointing), for
each switch added to it alone, and for all of them together (the efficient plan the trainer runs). Where a
benchmark's JSON is given (`benchmarks/rl_lm_memory.py --json`), its measured peak of the arm of the same
name stands beside the estimate ("did not fit" for an arm the cap stopped).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Sequence

from trmkit.rl.lm.memory import MemoryEstimate, MemorySwitches, RoundShape, estimate
from trmkit.rl.lm.shapes import shape_config

GiB = 2**30
NAIVE = MemorySwitches(dtype="float32", lora_rank=None, checkpointed_layers=0, chunk_tokens=None,
                       reference_copy=True)
TERMS = ("weights", "reference_copy", "grads", "adam", "activations", "logits", "attention", "kv_cache")
SHORT = {"reference_copy": "reference", "activations": "activ.", "attention": "attn", "kv_cache": "kv cache"}


def arms(rank: int, chunk: int, dtype: str) -> dict[str, MemorySwitches]:
    """naive, each switch alone on top of it, and all together in `dtype` (benchmarks/rl_lm_memory.py's names)."""
    switches = {"lora": {"lora_rank": rank, "reference_copy": False},  # the reference: the adapters-off base
                "checkpoint": {"checkpointed_layers": -1}, "chunked": {"chunk_tokens": chunk},
                "bf16": {"dtype": "bfloat16"}}
    out = {"naive": NAIVE, **{name: dataclasses.replace(NAIVE, **change) for name, change in switches.items()}}
    every = {k: v for change in switches.values() for k, v in change.items()}
    out["efficient"] = dataclasses.replace(NAIVE, **{**every, "dtype": dtype})
    return out


def measured_peaks(paths: Sequence[str | Path]) -> dict[str, str]:
    """Arm name -> its measured peak as printed ("2.14", or "did not fit") from benchmarks' JSON files (a later
    file's arm replaces an earlier one's)."""
    out: dict[str, str] = {}
    for path in paths:
        try:
            found = json.loads(Path(path).read_text(encoding="utf-8"))["arms"]
            out.update({name: (f"{arm['peak_rss_gb']:.2f}" if arm.get("fitted") else "did not fit")
                        for name, arm in found.items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{path}: not a JSON written by benchmarks/rl_lm_memory.py --json ({err})") from None
    return out


def table(shape_name: str, batch: int, prompt_len: int, response_len: int, rank: int = 16, chunk: int = 1024,
          dtype: str = "bfloat16", measured: Sequence[str | Path] = ()) -> tuple[list[str], dict]:
    """The printed lines and the same as a dict: per arm its terms (GiB), estimated peak and saving."""
    shape = shape_config(shape_name, key="--shape")
    round_ = RoundShape(batch, prompt_len, response_len)
    peaks = measured_peaks(measured)
    ests: dict[str, MemoryEstimate] = {name: estimate(shape, round_, sw) for name, sw in
                                       arms(rank, chunk, dtype).items()}
    naive = ests["naive"].peak
    head = ("arm", *(SHORT.get(t, t) for t in TERMS), "peak", "saved") + (("measured",) if peaks else ())
    lines = [f"one round of {shape_name}: {batch} rows x ({prompt_len} prompt + {response_len} response) tokens, "
             f"LoRA r={rank}, chunks of {chunk}, GiB (the memory model, rl/lm/memory.py)",
             " ".join(f"{h:>9}" if i else f"{h:<10}" for i, h in enumerate(head))]
    out = {}
    for name, est in ests.items():
        row = {t: est.terms.get(t, 0) / GiB for t in TERMS}
        row.update(peak=est.peak / GiB, saved=1 - est.peak / naive)
        out[name] = {**row, **({"measured": peaks[name]} if name in peaks else {})}
        cells = [f"{row[t]:9.2f}" for t in TERMS] + [f"{row['peak']:9.2f}", f"{row['saved']:9.0%}"]
        if peaks:
            cells.append(f"{peaks.get(name, '-'):>9}")
        lines.append(" ".join([f"{name:<10}", *cells]))
    return lines, out
