"""How to build a missing store: the `trmkit data ...` command a hint names, for the task it is for.

In order: the command a config file's comments give for its store (every preset names its own,
`#   trmkit data maze --size 11 ... --out data/maze-11`), else one for the task named (a run's
data_meta.json, or the task a preset's comments build for), else the general form. Nothing here
imports a task: a task is named, and the built-in ones have an example of their source arguments.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from trmkit.config import ConfigError

# The arguments a first store of each built-in task needs (`trmkit data TASK --help` has the rest)
SOURCE_ARGS = {
    "sudoku": "--source generate",
    "maze": "--size 15 --num 500 --test-fraction 1",
    "arc": "--subsets concept --eval-subset evaluation --limit 40",
    "pairs": "--source YOUR.jsonl",
    "email": "--source YOUR_MAILBOX",
    "email-mlm": "--from YOUR_EMAIL_STORE",
}
_COMMAND = re.compile(r"trmkit data [a-z][\w-]*(?: [^#\n]*)?")


class MissingStore(ConfigError):
    """A data.path with no split to read; the message ends in how to build it."""

    def __init__(self, root: Path, what: str, task: str | None = None, config_file: Path | None = None) -> None:
        self.root, self.what, self.task = Path(root), what, task
        super().__init__(f"data.path={root}: {what}; {build_hint(root, task, config_file)}")

    def for_config(self, config_file: str | Path | None) -> MissingStore:
        """The same error with the hint a config file's comments give (its preset's own command)."""
        return MissingStore(self.root, self.what, self.task, Path(config_file) if config_file else None)


def build_hint(root: Path, task: str | None = None, config_file: Path | None = None) -> str:
    """`build it with `trmkit data ...``: from the config file's comments, the task, or in general."""
    commands = config_commands(config_file) if config_file is not None else []
    for command in commands:
        if _out_of(command) is not None and Path(_out_of(command)).name == Path(root).name:
            return f"build it with `{_with_out(command, root)}`"
    task = task or (commands[0].split()[2] if commands else None)
    if task:
        args = SOURCE_ARGS.get(task, "")
        return (f"build it with `trmkit data {task} {args + ' ' if args else ''}--out {root}` "
                f"(options: `trmkit data {task} --help`)")
    return (f"build it with `trmkit data TASK --out {root}`, TASK the one this config trains "
            "(tasks: `trmkit data --help`)")


def config_commands(config_file: Path) -> list[str]:
    """The `trmkit data ...` commands in a config file's comments, continued lines joined."""
    try:
        lines = Path(config_file).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    comments, held = [], ""
    for line in lines:
        text = line.split("#", 1)[1].strip() if "#" in line else ""
        if held:
            text = held + " " + text
        held = text[:-1].rstrip() if text.endswith("\\") else ""
        if text and not held:
            comments.append(text)
    return [match.group(0).strip() for text in comments for match in [_COMMAND.search(text)] if match]


def _out_of(command: str) -> str | None:
    words = _split(command)
    return words[words.index("--out") + 1] if "--out" in words[:-1] else None


def _with_out(command: str, root: Path) -> str:
    words = _split(command)
    words[words.index("--out") + 1] = str(root)
    return " ".join(words)


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()
