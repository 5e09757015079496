"""`trmkit bench CONFIG --rl`: self-play throughput and memory (docs/rl.md).

Runs `warmup` + `steps` self-play rounds with the preset's plan (the same `session.prepare` as
training) and reports rollout tokens/s (sampling all roles, no gradients), update tokens/s
(the chunked TR-RPG backward over rl.update_epochs), seconds per round, the executor's cache
hit rate and the peak RSS of the whole process as the kernel counts it.
"""

from __future__ import annotations

import resource
import statistics
import time
from pathlib import Path
from typing import Callable

Log = Callable[[str], None]


def run_rl_bench(cfg, hw, steps: int = 3, warmup: int = 1, init: str | None = None, log: Log = print,
                 cache_dir: Path | None = None) -> dict:
    from trmkit.rl.commands import init_from, make_objective
    from trmkit.train.session import prepare

    objective, cfg = make_objective("train", cfg, log)
    try:
        s = prepare(cfg, hw, log=log, cache_dir=cache_dir, objective=objective)
        if init:
            init_from(s, Path(init), log)
        rows = []
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            m = objective.step(s.model, s.opts, s.cfg.train, s.ctx, None)
            m["seconds"] = time.perf_counter() - t0
            if i >= warmup:
                rows.append(m)
            log(f"round {i + 1}/{warmup + steps}{' (warm-up)' if i < warmup else ''}: {m['seconds']:.2f} s, "
                f"rollout {m['perf/rollout_tokens_per_s']:.0f} tokens/s, update {m['perf/update_tokens_per_s']:.0f} "
                f"tokens/s")
    finally:
        objective.close()
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {"rounds": steps, "samples_per_round": med("perf/samples"), "seconds_per_round": med("seconds"),
            "rollout_tokens_per_s": med("perf/rollout_tokens_per_s"),
            "update_tokens_per_s": med("perf/update_tokens_per_s"), "micro_batch": s.ctx.micro_batch,
            "threads": int(s.run.plan.threads.value), "cache_hit_rate": rows[-1]["cache/hit_rate"],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "parameters": s.model.num_parameters()}


def format_lines(r: dict) -> list[str]:
    return [f"self-play round: {r['samples_per_round']:.0f} sequences, {r['seconds_per_round']:.2f} s "
            f"(median of {r['rounds']}), micro-batch {r['micro_batch']}, {r['threads']} threads",
            f"rollout: {r['rollout_tokens_per_s']:.0f} tokens/s (sampling every role, no gradients)",
            f"update:  {r['update_tokens_per_s']:.0f} tokens/s (TR-RPG forward + backward, chunked)",
            f"executor cache hit rate {r['cache_hit_rate']:.2f}; peak RSS {r['peak_rss_gb']:.2f} GiB "
            f"(whole process, kernel's count)"]
