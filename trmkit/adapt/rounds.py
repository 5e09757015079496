"""The adaptation's rounds, as hooks on the one trainer (train/hooks.py; train/run.py `run`).

    on_start   (a fresh run) round 0: solve the adapt part, keep what the checker accepts; nothing kept ->
               no step is trained (the run ends with the starting weights, said why)
    on_step    every adapt.round_steps steps: re-solve what is still unsolved, keep the new answers (the
               stream, adapt/stream.py, mixes them in from the next step), score the held-out part one-shot;
               after the last step: the held-out part once more
    evaluation (the loop's end, when the clock or an early stop ended the steps first) the same last score
Each round writes one record to RUN_DIR/metrics.jsonl (adapt/...: problems tried and solved by the checker,
pseudo-labels kept, held-out one-shot accuracy by the checker, the replay share, seconds) and one console
line with the elapsed time and the ETA. The kept answers live in the stream, whose state every checkpoint
holds, so a resumed run neither solves a round twice nor loses one.

The arms (adapt.objective, adapt.keep) share these rounds: tr-rpg's kept answers live in its objective
(adapt/trrpg.py), which the rounds start from the base run's weights and whose mean reward each record adds;
`continue` solves nothing (the held-out part is still scored); keep=vote keeps the tries' plurality answer.
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

PROGRESS_SECONDS = 60  # a solving round says how far it is at most this often

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
        self.ended = False  # the end's record (the last weights on the held-out part) written
        self.first_step = 0  # the step this session started at

    def on_start(self, s: Session) -> None:
        self.stream = s.objective if s.objective is not None else s.data.stream
        if not isinstance(self.stream, MixedStream) and not hasattr(self.stream, "round_reward"):
            raise TypeError("adapt's rounds need adapt's MixedStream or its tr-rpg objective (adapt/command.py)")
        self.solver = make_solver(self.acfg.trajectories, self.acfg.select_from, self.acfg.steps,
                                  s.model.cfg.halt_max_steps, self.source.variants,
                                  s.run.eval_batch or int(s.run.plan.eval_batch.value), self.log)
        self.metrics = JsonlLogger(rundir.path(Path(s.cfg.run.dir), rundir.METRICS))
        step = self.first_step = s.state.step
        self.rounds_done = step // self.acfg.round_steps + (step > 0)
        if step > 0:
            self.log(f"adapt: resumed at step {step}: {len(self.stream.kept)} pseudo-labels kept, "
                     f"round {self.rounds_done} next at step {self.rounds_done * self.acfg.round_steps}")
            return
        if s.objective is not None:
            s.objective.start(s.model, s.opts, self.log)  # the trainer starts only a store's run from init_from
        self._round(s, 0)
        if not self.stream.kept and self.acfg.objective == "pseudo":
            self.log("adapt: the checker accepted none of the answers: there is nothing to train on, so no step "
                     "is trained and the new run keeps the starting weights (try more adapt.trajectories, "
                     "adapt.steps, or check the checker)")
            s.cfg = config_mod.replace(s.cfg, "train", max_steps=0)

    def on_step(self, s: Session, metrics: dict[str, float]) -> None:
        step = s.state.step
        if step >= s.cfg.train.max_steps:
            self._round(s, self.rounds_done, solve=False)  # the last weights on the held-out part
            self.ended = True
        elif step % self.acfg.round_steps == 0:
            self._round(s, self.rounds_done)

    def evaluation(self, s: Session) -> dict | None:
        """Steps that ended before train.max_steps (train.max_minutes' hard stop, a time fit that lowered it,
        an early stop) still get the end's record: the last weights on the held-out part. The loop evaluates."""
        if self.metrics is not None and not self.ended and s.state.step > self.first_step:
            self._round(s, self.rounds_done, solve=False)
            self.ended = True
        return None

    def after_training(self, s: Session, result: dict) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if result.get("stopped"):  # the loop's line names `trmkit train --resume`, which knows no rounds
            self.log(f"adapt: continue this adaptation with `trmkit adapt --resume {s.cfg.run.dir}`")

    # ------------------------------------------------------------------ one round

    def _round(self, s: Session, number: int, solve: bool = True) -> None:
        src, t0 = self.source, time.perf_counter()
        tries = solve and self.acfg.objective != "continue"  # the control trains on the original source only
        tried, new = (self._tries(number) if tries else np.zeros(0, np.int64)), {}
        if len(tried):
            share = self.acfg.vote_share if self.acfg.keep == "vote" else 0.0
            new = solve_round(s, self.solver, src.checking, src.problems.inputs, src.problems.puzzle_ids, tried,
                              number, len(src.problems), vote_share=share, progress=self._progress(number, len(tried)))
            self.stream.keep(new)
        solve_s, t1 = time.perf_counter() - t0, time.perf_counter()
        acc = (one_shot(s, self.solver, src.checking, src.problems.inputs, src.problems.puzzle_ids, src.heldout)
               if len(src.heldout) else float("nan"))
        record = {"adapt/round": number, "adapt/tried": len(tried), "adapt/solved": len(new),
                  "adapt/kept": len(self.stream.kept), "adapt/unsolved": len(src.adapt) - len(self.stream.kept),
                  "adapt/heldout_one_shot": acc, "adapt/heldout_problems": len(src.heldout),
                  "adapt/replay_share": self._replay_share(), "adapt/solve_seconds": round(solve_s, 2),
                  "adapt/heldout_seconds": round(time.perf_counter() - t1, 2)}
        if getattr(self.stream, "reblank", None) is not None:  # adapt.reblank: what became of the kept samples
            record.update({f"adapt/reblank_{k}": v for k, v in self.stream.reblanked.items()})
        if hasattr(self.stream, "round_reward"):  # tr-rpg: the mean checker reward of its tries since the last record
            record["adapt/reward_mean"] = self.stream.round_reward()
        if s.run.world.main:
            self.metrics.log(s.state.step, record)
        self.rounds_done = number + solve
        self._say(s, record, solve)

    def _progress(self, number: int, total: int) -> Callable[[int, int], None]:
        """A round's console line every PROGRESS_SECONDS while it solves (a 61 x 61 maze round takes minutes)."""
        t0 = last = time.perf_counter()

        def say(tried: int, accepted: int) -> None:
            nonlocal last
            now = time.perf_counter()
            if now - last >= PROGRESS_SECONDS and tried < total:
                last = now
                eta = (now - t0) / tried * (total - tried)
                self.log(f"adapt: round {number}: tried {tried} of {total}, {accepted} accepted so far; "
                         f"{_clock(now - t0)} solving, ETA of the round {_clock(eta)}")
        return say

    def _tries(self, number: int) -> np.ndarray:
        """The unsolved adapt problems this round tries: all, or adapt.solve_limit of them, a window that moves
        on from round to round."""
        unsolved = np.array([p for p in self.source.adapt if int(p) not in self.stream.kept], dtype=np.int64)
        limit = self.acfg.solve_limit
        if limit and len(unsolved) > limit:
            unsolved = np.roll(unsolved, -(number * limit) % len(unsolved))[:limit]
        return unsolved

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
        if "adapt/reward_mean" in r:
            what += f" (tr-rpg tries' mean reward since the last round {r['adapt/reward_mean']:.3f})"
        if r.get("adapt/reblank_not_completion"):
            what += (f" (reblank: {r['adapt/reblank_not_completion']} kept samples change a given of their input, "
                     "so they trained as they are)")
        self.log(f"adapt: {what} at step {step}/{total}; {r['adapt/kept']}/{len(self.source.adapt)} pseudo-labels "
                 f"kept; held-out one-shot {acc:.3f} by the checker ({r['adapt/heldout_problems']} problems); "
                 f"replay {r['adapt/replay_share']:.2f}; {_clock(elapsed)} elapsed, ETA {_clock(max(0.0, eta))}")


def _clock(seconds: float) -> str:
    m, sec = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"
