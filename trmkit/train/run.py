"""The one way into training: `run(cfg, hw, ...)` claims the run directory, prepares the session,
runs the loop and hands the result back.

Every command that trains comes through here: `trmkit train` and `trmkit.fit` (api.py), `trmkit rl
seed|train` (an objective in place of a store, the start from --init as a hook), `trmkit email
pretrain`, and `trmkit bench --learn` (learn.py: its evaluations at marks of training time are hooks).
What a caller adds goes through `Hooks` (train/hooks.py), never through a loop of its own:
`train_step` has one caller, the loop, and the loop one, this function.

    >>> result = run(cfg, hardware.probe(), log=print, cache_dir=Path("~/.cache/trmkit"))
    >>> result["steps"]
    100
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from trmkit.config import Config
from trmkit.data.generated import Sampler
from trmkit.data.store import Split, StoreMeta
from trmkit.hardware import HardwareInfo
from trmkit.model.parts import PartsFactory
from trmkit.train import loop
from trmkit.train import distributed as dist_mod
from trmkit.train.distributed import SINGLE, World
from trmkit.train.hooks import NO_HOOKS, Hooks
from trmkit.train.objective import Objective
from trmkit.train.resume import claim_run_dir, clear_run
from trmkit.train.scorer import Scorer
from trmkit.train.session import prepare

Log = Callable[[str], None]


def run(cfg: Config, hw: HardwareInfo, *, hooks: Hooks = NO_HOOKS, log: Log = print,
        cache_dir: Path | None = None, objective: Objective | None = None, world: World = SINGLE,
        resume: bool = False, force: bool = False, is_tty: bool = False,
        scorer: Callable[[Split], Scorer] | None = None, sampler: Callable[..., Sampler] | None = None,
        before_training: Callable[..., None] | None = None, parts: PartsFactory | None = None,
        wrap_stream: Callable[..., object] | None = None, batch_meta: StoreMeta | None = None) -> dict:
    """Train cfg on this machine: the run's result (its summary, or {"stopped", "steps", "exit_code"}
    after a stop signal, saved).

    resume: continue the run in run.dir from its newest checkpoint; force: start afresh there, deleting the
    old run's files once the new run is prepared, before it writes its own (train/resume.py `claim_run_dir`:
    neither, and a run.dir that holds a run is refused).
    cache_dir: the planner's measurement cache (the CLI's, so every command plans from the same measurements).
    objective: a workload that makes its own batches, in place of a store (train/objective.py).
    world: this process's place among several (train/distributed.py).
    scorer, sampler, before_training, parts: what the store's task plugs in (session.prepare).
    wrap_stream: a source of training samples around the store's stream (session.prepare; trmkit adapt).
    batch_meta: the store whose sequence length the training batches have, when not data.path's (session.prepare)."""
    replace = claim_run_dir(cfg.run.dir, resume, force, log)  # decides; deletes nothing yet
    s = prepare(cfg, hw, log=log, cache_dir=cache_dir, objective=objective, world=world, scorer=scorer,
                sampler=sampler, before_training=before_training, parts=parts, fresh=replace,
                wrap_stream=wrap_stream, batch_meta=batch_meta)
    if replace:  # the new run is checked (config, store, plan): only now is the old one deleted
        if world.main:
            clear_run(Path(cfg.run.dir), log)
        if world.active:  # every process has rendezvoused in prepare; none writes before rank 0 has cleared
            dist_mod.barrier()
    result = loop.train(s, hooks=hooks, is_tty=is_tty, log=log)
    hooks.after_training(s, result)
    return result
