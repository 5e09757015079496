"""The task registry: a plain dict of name -> Task, written in code (see tasks/base.py, docs/tasks.md).

It sits above the tasks and the applications (the e-mail task lives in trmkit/email/) and
below the CLI, which looks a task up here by name: `trmkit data NAME`, the store's meta.json
"task" for the trainer's scorer, data_meta.json's "task" for `trmkit report`'s plots, and
`bench --learn --task NAME`.

Adding a task: write its module with a `TASK = Task(...)` and list it in TASKS below; or call
`register(task)` (tests do this with toy tasks).
"""

from __future__ import annotations

from trmkit.email.task import TASK as EMAIL
from trmkit.tasks import arc, maze, pairs, sudoku
from trmkit.tasks.base import Task

TASKS: dict[str, Task] = {task.name: task for task in (sudoku.TASK, maze.TASK, arc.TASK, pairs.TASK, EMAIL)}


def register(task: Task) -> Task:
    """Add (or replace) a task under its name."""
    TASKS[task.name] = task
    return task


def get(name: str) -> Task:
    """The task called `name`; a clear error lists the known ones."""
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}: known tasks are {', '.join(sorted(TASKS))}")
    return TASKS[name]
