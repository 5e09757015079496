"""The task registry: a plain dict of name -> Task (see base.py and docs/tasks.md).

Adding a task: write tasks/NAME.py with a `TASK = Task(...)` and list it in
`_BUILT_IN`; or call `register(task)` (tests do this with toy tasks).
"""

from __future__ import annotations

import importlib

from trmkit.tasks.base import Task

_BUILT_IN = ("sudoku", "maze", "arc", "email")
TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add (or replace) a task under its name."""
    TASKS[task.name] = task
    return task


def all_tasks() -> dict[str, Task]:
    """Every task, the built-in ones loaded on first use."""
    for name in _BUILT_IN:
        if name not in TASKS:
            register(importlib.import_module(f"trmkit.tasks.{name}").TASK)
    return TASKS


def get(name: str) -> Task:
    """The task called `name`; a clear error lists the known ones."""
    tasks = all_tasks()
    if name not in tasks:
        raise KeyError(f"unknown task {name!r}: known tasks are {', '.join(sorted(tasks))}")
    return tasks[name]
