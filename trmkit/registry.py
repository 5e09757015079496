"""The task registry: a plain dict of name -> Task, written in code (see tasks/base.py, docs/tasks.md),
and the applications' config sections (SECTIONS, read by the config loader: trmkit/config.py).

It sits above the tasks and the applications (the e-mail task lives in trmkit/email/) and
below the CLI, which looks a task up here by name: `trmkit data NAME`, the store's meta.json
"task" for the trainer's scorer, data_meta.json's "task" for `trmkit report`'s plots, and
`bench --learn --task NAME`.

Adding a task: write its module with a `TASK = Task(...)` and list it in TASKS below; or call
`register(task)` (tests do this with toy tasks); or, from another package, declare it as an
entry point of the group "trmkit.tasks" (`[project.entry-points."trmkit.tasks"]
mytask = "mypackage.task:TASK"`): the CLI calls `load_plugins()` before it lists the tasks, and
`get` calls it for a name it does not know.
"""

from __future__ import annotations

import sys
from importlib import metadata
from typing import Callable, Iterable

from trmkit.adapt.config import AdaptConfig
from trmkit.email.config import EmailModelConfig
from trmkit.email.pretrain import TASK as EMAIL_MLM
from trmkit.email.task import TASK as EMAIL
from trmkit.rl.config import RLConfig
from trmkit.tasks import arc, maze, pairs, sudoku
from trmkit.tasks.base import Task
from trmkit.tasks.maze.config import MazeConfig

TASKS: dict[str, Task] = {task.name: task for task in (sudoku.TASK, maze.TASK, arc.TASK, pairs.TASK, EMAIL,
                                                         EMAIL_MLM)}

# The applications' and tasks' own config sections: name -> dataclass; trmkit.config builds and checks them
# when it is given this dict (`config.load(path, overrides, apps=SECTIONS)`), and writes them beside the
# generic ones.
SECTIONS: dict[str, type] = {"rl": RLConfig, "maze": MazeConfig, "email": EmailModelConfig, "adapt": AdaptConfig}


def register(task: Task) -> Task:
    """Add (or replace) a task under its name."""
    TASKS[task.name] = task
    return task


def get(name: str) -> Task:
    """The task called `name`; a name not built in loads the plugins first (once: a store of a plugin's task
    is trained or evaluated from Python as from the CLI); a clear error lists the known ones."""
    if name not in TASKS and not _PLUGINS_READ:
        for problem in load_plugins():
            print(f"trmkit: {problem}", file=sys.stderr)
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}: known tasks are {', '.join(sorted(TASKS))}")
    return TASKS[name]


PLUGIN_GROUP = "trmkit.tasks"
_PLUGINS_READ: list[bool] = []  # non-empty once the installed plugins were read


def load_plugins(entry_points: Callable[..., Iterable] | None = None) -> list[str]:
    """Register the tasks other packages declare in the "trmkit.tasks" entry-point group; returns one
    message per plugin that failed (it could not be imported, is not a Task, or takes a built-in
    task's name), naming the plugin and its package, so a broken plugin never hides the others."""
    problems = []
    if entry_points is None:
        _PLUGINS_READ.append(True)
    for ep in (entry_points or metadata.entry_points)(group=PLUGIN_GROUP):
        dist = getattr(ep, "dist", None)
        where = f"task plugin {ep.name} = {ep.value}" + (f" (package {dist.name})" if dist is not None else "")
        try:
            task = ep.load()
        except Exception as err:  # noqa: BLE001 - any failure of foreign code is reported, not raised
            problems.append(f"{where} failed to load: {type(err).__name__}: {err}; fix or uninstall that package")
            continue
        if not isinstance(task, Task):
            problems.append(f"{where} is a {type(task).__name__}, not a trmkit.tasks.base.Task; it is left out")
        elif TASKS.get(task.name, task) is not task:
            problems.append(f"{where} is named {task.name!r}, which another task has; it is left out")
        else:
            register(task)
    return problems
