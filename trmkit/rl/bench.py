"""`trmkit bench CONFIG --rl`: self-play throughput and memory (docs/rl.md).

Runs `warmup` + `steps` self-play rounds through the one trainer (`train.run`, with timing hooks, in a
scratch run folder) and reports rollout tokens/s (sampling all roles, no gradients), update tokens/s
(the chunked TR-RPG backward over rl.update_epochs), seconds per round, the executor's cache
hit rate and the peak RSS of the whole process as the kernel counts it.
"""

from __future__ import annotations

import dataclasses
import resource
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Callable

from trmkit.train.hooks import Hooks

Log = Callable[[str], None]


class Timing(Hooks):
    """The bench's rounds are the loop's own steps: each one's metrics and seconds, the first `warmup` left
    out; the run ends after warmup + steps rounds, with no evaluation of its own."""

    owns_end = True

    def __init__(self, steps: int, warmup: int, init: str | None, log: Log) -> None:
        self.steps, self.warmup, self.init, self.log = steps, warmup, init, log
        self.rows: list[dict] = []
        self.done = 0
        self.facts: dict = {}

    def on_start(self, s) -> None:
        from trmkit.rl.commands import init_from

        if self.init:
            init_from(s, Path(self.init), self.log)

    def on_step(self, s, metrics: dict[str, float]) -> None:
        self.done += 1
        seconds = metrics["perf/seconds_per_step"]  # the loop's own measure of the round
        m = {**metrics, "seconds": seconds, "perf/samples": round(metrics["perf/samples_per_second"] * seconds)}
        if self.done > self.warmup:
            self.rows.append(m)
        self.log(f"round {self.done}/{self.warmup + self.steps}{' (warm-up)' if self.done <= self.warmup else ''}: "
                 f"{m['seconds']:.2f} s, rollout {m['perf/rollout_tokens_per_s']:.0f} tokens/s, update "
                 f"{m['perf/update_tokens_per_s']:.0f} tokens/s")
        self.facts = {"micro_batch": s.ctx.micro_batch, "threads": int(s.run.plan.threads.value),
                      "parameters": s.model.num_parameters()}

    def should_stop(self, s) -> bool:
        return self.done >= self.warmup + self.steps

    def evaluation(self, s) -> dict:
        return {"samples": 0}  # a bench times rounds; it does not evaluate


def run_rl_bench(cfg, hw, steps: int = 3, warmup: int = 1, init: str | None = None, log: Log = print,
                 cache_dir: Path | None = None) -> dict:
    """warmup + steps self-play rounds through the one trainer (train/run.py), in a scratch run folder."""
    from trmkit.rl.commands import make_objective
    from trmkit.train.run import run

    objective, cfg = make_objective("train", cfg, log)
    scratch = Path(tempfile.mkdtemp(prefix="trmkit-rl-bench-"))
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=str(scratch / "run")))
    hooks = Timing(steps, warmup, init, log)
    try:
        run(cfg, hw, hooks=hooks, log=log, cache_dir=cache_dir, objective=objective)
    finally:
        objective.close()
        shutil.rmtree(scratch, ignore_errors=True)
    rows = hooks.rows
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    return {"rounds": steps, "samples_per_round": med("perf/samples"), "seconds_per_round": med("seconds"),
            "rollout_tokens_per_s": med("perf/rollout_tokens_per_s"),
            "update_tokens_per_s": med("perf/update_tokens_per_s"), **hooks.facts,
            "cache_hit_rate": rows[-1].get("cache/hit_rate"),  # the TRM policy's executor cache (an LM's: none)
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def format_lines(r: dict) -> list[str]:
    return [f"self-play round: {r['samples_per_round']:.0f} sequences, {r['seconds_per_round']:.2f} s "
            f"(median of {r['rounds']}), micro-batch {r['micro_batch']}, {r['threads']} threads",
            f"rollout: {r['rollout_tokens_per_s']:.0f} tokens/s (sampling every role, no gradients)",
            f"update:  {r['update_tokens_per_s']:.0f} tokens/s (TR-RPG forward + backward, chunked)",
            ("" if r["cache_hit_rate"] is None else f"executor cache hit rate {r['cache_hit_rate']:.2f}; ")
            + f"peak RSS {r['peak_rss_gb']:.2f} GiB "
            f"(whole process, kernel's count)"]
