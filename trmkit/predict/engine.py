"""A run's model, loaded once, answering batches of inputs (`trmkit predict`, `Run.predict`).

The run is opened as `trmkit eval` opens it: the resolved config from the run directory, the store
checked against the run (train/session.py `prepare`), the final weights through the one loader
(train/evaluate.py `load_weights`). Each input runs the trained N_sup supervision steps, `--steps K`,
or with `--steps auto[:CAP]` as many as it needs until its answer is stable (train/halting.py): the
default for mazes, since a maze larger than the training ones needs more steps than N_sup. The answer
is read through `TRM.answer_logits` (a maze-trace model's trace tokens fold into the answer they stand
for); the padding token is never an answer. A conv model has no positions and reads a maze of any
size: for each other grid shape a model of that shape is built once, with the weights already loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from trmkit import config as config_mod
from trmkit import rundir
from trmkit.config import ConfigError

if TYPE_CHECKING:
    from trmkit.model.parts import PartsFactory

Log = Callable[[str], None]
TASKS = ("sudoku", "maze", "pairs")  # the stores whose runs predict answers (e-mail: `trmkit email predict`)


@dataclass(frozen=True)
class Steps:
    """How many supervision steps each input runs: `fixed` K, or until stable under `rule`."""

    fixed: int | None
    rule: object | None  # train/halting.py StableAnswer
    reason: str

    def describe(self) -> str:
        what = f"{self.fixed} supervision steps" if self.fixed else f"auto: {self.rule.describe()}"
        return f"predict: --steps {what} ({self.reason})"


def parse_steps(text: str | int | None, task: str, n_sup: int) -> Steps:
    """`--steps K|auto[:CAP]` or None: the task's default (auto for mazes, the trained N_sup else)."""
    from trmkit.train import halting

    if text is None and task == "maze":
        rule, why = halting.rule_for(0, n_sup)
        return Steps(None, rule, f"the default for mazes: a maze larger than the trained ones needs more steps "
                                 f"than N_sup; cap: {why}")
    if text is None:
        return Steps(n_sup, None, "the default: the trained N_sup")
    auto = halting.parse_auto(str(text))
    if auto is not None:
        rule, why = halting.rule_for(auto, n_sup)
        return Steps(None, rule, f"cap: {why}")
    if not str(text).strip().isdigit() or int(text) < 1:
        raise ConfigError(f"--steps {text}: give a number of supervision steps (e.g. --steps 16), or auto[:CAP]")
    return Steps(int(text), None, "--steps K")


def check_task(task: str | None, run_dir: Path) -> None:
    """Nothing for a run of a task `trmkit predict` answers (or a run from before data_meta.json); else a
    ConfigError naming the command that answers it."""
    if task is not None and task not in TASKS:
        hint = "; e-mail runs answer with `trmkit email predict`" if task.startswith("email") else ""
        raise ConfigError(f"{run_dir}: a run of the {task!r} task; `trmkit predict` answers runs trained on "
                          f"{', '.join(TASKS)} stores{hint}")


def model_parts(task: str | None) -> PartsFactory | None:
    """The pieces of the model (model/parts.py) the run's task adds, e.g. a maze trace's answer fold."""
    from trmkit.tasks import maze, pairs, sudoku

    return {t.name: t.model_parts for t in (sudoku.TASK, maze.TASK, pairs.TASK)}.get(task or "")


class Predictor:
    """The model of one run, its weights loaded once, and the store's task it answers."""

    def __init__(self, session, task: str) -> None:
        self.session, self.task = session, task
        self.meta = (session.data.train or session.data.test).meta
        self._models: dict[tuple[int, int], torch.nn.Module] = {}
        session.model.eval()

    @classmethod
    def open(cls, run_dir: Path, data: str | None, hw, log: Log, cache_dir: Path | None,
             verbose: bool = False) -> "Predictor":
        from trmkit.plan import plan_lines_to
        from trmkit.train import evaluate
        from trmkit.train.resume import check_evaluable
        from trmkit.train.session import prepare

        if Path(run_dir).is_file() or not rundir.path(run_dir, rundir.CONFIG).is_file():
            raise ConfigError(f"{run_dir}: no {rundir.CONFIG} there; is it a run directory written by "
                              "`trmkit train`?")
        check_evaluable(run_dir, "predict")  # a self-play run: `trmkit rl eval`
        check_task(rundir.task_of(run_dir), run_dir)  # before the store is read: an e-mail run needs its part
        overrides = [f"run.dir={run_dir}"] + ([f"data.path={data}"] if data else [])
        cfg = config_mod.load(rundir.path(run_dir, rundir.CONFIG), overrides)
        session = prepare(cfg, hw, log=plan_lines_to(log, verbose), cache_dir=cache_dir, evaluate_only=True,
                          parts=model_parts(rundir.task_of(run_dir)))
        task = (session.data.train or session.data.test).meta.task
        check_task(task, run_dir)
        evaluate.load_weights(session, run_dir)
        return cls(session, task)

    @property
    def n_sup(self) -> int:
        return int(self.session.model.cfg.halt_max_steps)

    def refuses(self, shape: tuple[int, int]) -> str | None:
        """Why the model cannot read a grid of this shape (None: it can)."""
        cfg = self.session.model.cfg
        if cfg.mixer == "conv" or shape[0] * shape[1] == cfg.seq_len:
            return None
        side = round(cfg.seq_len ** 0.5)
        return (f"this run's model (mixer={cfg.mixer}) reads {side} x {side} grids only; a model without positions "
                "(mixer=conv) reads any size")

    def model_for(self, shape: tuple[int, ...]) -> torch.nn.Module:
        """The loaded model, or for a grid of another shape (a conv model) one built for it with its weights."""
        from trmkit.model.trm import resized

        model, cfg = self.session.model, self.session.model.cfg
        if len(shape) != 2 or cfg.mixer != "conv" or tuple(shape) == (cfg.grid_height, cfg.grid_width):
            return model
        if shape not in self._models:
            self._models[shape] = resized(model, shape[0], shape[1]).eval()
        return self._models[shape]

    def answer(self, xs: list[np.ndarray], steps: Steps) -> tuple[list[np.ndarray], list[int]]:
        """Each input's predicted tokens (in its own shape) and the supervision steps it took; inputs of
        one shape go in batches of the plan's evaluation batch (fewer for a larger grid)."""
        out: list[np.ndarray | None] = [None] * len(xs)
        used: list[int] = [0] * len(xs)
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i, x in enumerate(xs):
            by_shape.setdefault(tuple(x.shape), []).append(i)
        cells = max(1, int(self.session.model.cfg.seq_len))
        for shape, index in by_shape.items():
            size = max(1, int(self.session.run.plan.eval_batch.value) * cells // max(1, int(np.prod(shape))))
            model = self.model_for(shape)
            for start in range(0, len(index), size):
                chunk = index[start:start + size]
                tokens, took = self._think(model, np.stack([xs[i].reshape(-1) for i in chunk]), steps)
                for i, t, k in zip(chunk, tokens, took):
                    out[i], used[i] = t.reshape(shape), int(k)
        return out, used  # type: ignore[return-value]

    @torch.no_grad()
    def _think(self, model, x: np.ndarray, steps: Steps) -> tuple[np.ndarray, np.ndarray]:
        """(B, L) inputs -> (B, L) answer tokens and (B,) steps taken."""
        from trmkit.train.evaluate import think_readouts
        from trmkit.train.halting import think_until_stable

        ctx = self.session.ctx
        inputs = torch.from_numpy(x).to(ctx.device)
        pids = torch.zeros(len(x), dtype=torch.int64, device=ctx.device)
        if steps.fixed is not None:
            *_, (_, logits, _, _) = think_readouts(model, inputs, pids, ctx, [steps.fixed])
            used = np.full(len(x), steps.fixed)
        else:
            logits, _, _, took = think_until_stable(model, inputs, pids, ctx, steps.rule)
            used = took.cpu().numpy()
        logits = model.answer_logits(logits, inputs).float()  # (B, L, V)
        logits[..., 0] = float("-inf")  # the padding token is never an answer
        return logits.argmax(-1).cpu().numpy(), used
