"""The adaptation's rounds, as hooks on the one trainer (train/hooks.py; train/run.py `run`).

    on_start   (a fresh run) round 0: solve the adapt part, keep what the checker accepts; nothing kept ->
               no step is trained (the run ends with the starting weights, said why)
    on_step    every adapt.round_steps steps: re-solve what is still unsolved, keep the new answers (the
               stream, adapt/stream.py, mixes them in from the next step), score the held-out part one-shot;
               after the last step: the held-out part once more
Each round writes one record to RUN_DIR/metrics.jsonl (adapt/...: problems tried and solved by the checker,
pseudo-labels kept, held-out one-shot accuracy by the checker, the replay share, seconds) and one console
line with the elapsed time and the ETA. The kept answers live in the stream, whose state every checkpoint
holds, so a resumed run neither solves a round twice nor loses one.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import numpy as np

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.adapt.config import AdaptConfig
from trmkit.adapt.problems import Problems
from trmkit.adapt.solve import Solver, make_solver, one_shot, solve_round
from trmkit.adapt.stream import MixedStream
from trmkit.data.variants import Variants
from trmkit.monitor.loggers import JsonlLogger
from trmkit.train.hooks import Hooks
from trmkit.train.session import Session

Log = Callable[[str], None]


@dataclasses.dataclass
class Source:
    """The new source as the rounds use it: its problems, the split, the checker and the task's variants."""

    problems: Problems
    adapt: np.ndarray  # problem indices solved and trained on
    heldout: np.ndarray  # problem indices only scored
    checking: object  # tasks/base.py Checking
    variants: Variants | None  # the task's symmetric variants for the tries (None: noise only)


class Rounds(Hooks):
    """Solve, keep, train, re-solve: the rounds of `trmkit adapt` on the trainer's loop."""

    def __init__(self, acfg: AdaptConfig, source: Source, log: Log = print) -> None:
        self.acfg, self.source, self.log = acfg, source, log
        self.solver: Solver | None = None
        self.metrics: JsonlLogger | None = None
        self.stream: MixedStream | None = None
        self.rounds_done = 0

    def on_start(self, s: Session) -> None:
        if not isinstance(s.data.stream, MixedStream):
            raise TypeError("adapt's rounds need the run's stream to be adapt's MixedStream (adapt/command.py)")
        self.stream = s.data.stream
        self.solver = make_solver(self.acfg.trajectories, self.acfg.select_from, self.acfg.steps,
                                  s.model.cfg.halt_max_steps, self.source.variants,
                                  s.run.eval_batch or int(s.run.plan.eval_batch.value), self.log)
        self.metrics = JsonlLogger(rundir.path(Path(s.cfg.run.dir), rundir.METRICS))
        step = s.state.step
        self.rounds_done = step // self.acfg.round_steps + (step > 0)
        if step > 0:
            self.log(f"adapt: resumed at step {step}: {len(self.stream.kept)} pseudo-labels kept, "
                     f"round {self.rounds_done} next at step {self.rounds_done * self.acfg.round_steps}")
            return
        self._round(s, 0)
        if not self.stream.kept:
            self.log("adapt: the checker accepted none of the answers: there is nothing to train on, so no step "
                     "is trained and the new run keeps the starting weights (try more adapt.trajectories, "
                     "adapt.steps, or check the checker)")
            s.cfg = config_mod.replace(s.cfg, "train", max_steps=0)

    def on_step(self, s: Session, metrics: dict[str, float]) -> None:
        step = s.state.step
        if step >= s.cfg.train.max_steps:
            self._round(s, self.rounds_done, solve=False)  # the last weights on the held-out part
        elif step % self.acfg.round_steps == 0:
            self._round(s, self.rounds_done)

    def after_training(self, s: Session, result: dict) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if result.get("stopped"):  # the loop's line names `trmkit train --resume`, which knows no rounds
            self.log(f"adapt: continue this adaptation with `trmkit adapt --resume {s.cfg.run.dir}`")

    # ------------------------------------------------------------------ one round

    def _round(self, s: Session, number: int, solve: bool = True) -> None:
        src, t0 = self.source, time.perf_counter()
        tried, new = self._tries(number) if solve else (np.zeros(0, np.int64), {})
        if len(tried):
            new = solve_round(s, self.solver, src.checking, src.problems.inputs, src.problems.puzzle_ids, tried,
                              number, len(src.problems))
            self.stream.keep(new)
        solve_s, t1 = time.perf_counter() - t0, time.perf_counter()
        acc = (one_shot(s, self.solver, src.checking, src.problems.inputs, src.problems.puzzle_ids, src.heldout)
               if len(src.heldout) else float("nan"))
        record = {"adapt/round": number, "adapt/tried": len(tried), "adapt/solved": len(new),
                  "adapt/kept": len(self.stream.kept), "adapt/unsolved": len(src.adapt) - len(self.stream.kept),
                  "adapt/heldout_one_shot": acc, "adapt/heldout_problems": len(src.heldout),
                  "adapt/replay_share": self._replay_share(), "adapt/solve_seconds": round(solve_s, 2),
                  "adapt/heldout_seconds": round(time.perf_counter() - t1, 2)}
        if s.run.world.main:
            self.metrics.log(s.state.step, record)
        self.rounds_done = number + solve
        self._say(s, record, solve)

    def _tries(self, number: int) -> tuple[np.ndarray, dict]:
        """The unsolved adapt problems this round tries: all, or adapt.solve_limit of them, a window that moves
        on from round to round."""
        unsolved = np.array([p for p in self.source.adapt if int(p) not in self.stream.kept], dtype=np.int64)
        limit = self.acfg.solve_limit
        if limit and len(unsolved) > limit:
            unsolved = np.roll(unsolved, -(number * limit) % len(unsolved))[:limit]
        return unsolved, {}

    def _replay_share(self) -> float:
        """The share of samples replayed from the original training set so far (the configured share once any
        answer is kept: 1.0 while none is)."""
        served = self.stream.replayed + self.stream.adapted
        return self.stream.replayed / served if served else (self.acfg.replay_share if self.stream.kept else 1.0)

    def _say(self, s: Session, r: dict, solve: bool) -> None:
        step, total = s.state.step, s.cfg.train.max_steps
        elapsed = time.perf_counter() - (s.started or time.perf_counter())
        eta = (60 * s.cfg.train.max_minutes - elapsed if s.cfg.train.max_minutes
               else elapsed / max(1, step) * (total - step))
        what = (f"round {r['adapt/round']}: solved {r['adapt/solved']} of {r['adapt/tried']} tried" if solve
                else "the end")
        acc = r["adapt/heldout_one_shot"]
        self.log(f"adapt: {what} at step {step}/{total}; {r['adapt/kept']}/{len(self.source.adapt)} pseudo-labels "
                 f"kept; held-out one-shot {acc:.3f} by the checker ({r['adapt/heldout_problems']} problems); "
                 f"replay {r['adapt/replay_share']:.2f}; {_clock(elapsed)} elapsed, ETA {_clock(max(0.0, eta))}")


def _clock(seconds: float) -> str:
    m, sec = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"
