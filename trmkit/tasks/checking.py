"""A user's own checker, `--checker file.py:function`, run in a process of its own (`trmkit adapt`).

The function is called as `function(input, output) -> bool` on one puzzle at a time. It runs in a
child process, loaded there from its file by path, so that
- a call that runs past the time limit is stopped: the child's process group is killed and
  the error names the puzzle;
- whatever the user's code does (raises, prints, exits, never returns) cannot stall or break the run.
The child is a fresh interpreter (`python -c`, not multiprocessing: its "spawn" re-runs the caller's
main script, which breaks a script without an `if __name__ == "__main__"` guard, and a fork would copy
the trainer's threads and locks). It speaks over a socket pair with multiprocessing's Connection (pickled
messages); the user's prints go to stderr, and it dies with its parent (Linux: PR_SET_PDEATHSIG).
The parent sends a batch of puzzles at once and waits for each verdict in turn, at most `time_limit`
seconds for each, so the cost per puzzle is a pickled pair and a reply, not a process.

A raised exception (with the line of the user's file it came from), a result that is not a bool
(Python's, or numpy's), a call past the limit and a child that died are each a ConfigError naming the
checker, the puzzle (the caller says which: pairs/checker.py names its JSONL line) and the fix.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Sequence

from trmkit.config import ConfigError

LOAD_LIMIT = 60.0  # seconds the child may take to import the user's file before it is refused
EXAMPLE = "examples/latin_checker.py:is_latin_square"
FIX = "it must return True or False for every (input, output) and never raise (docs/tasks.md, Checkers)"


@dataclass(frozen=True)
class Spec:
    """A parsed `--checker file.py:function`."""

    path: Path
    function: str
    text: str  # as the user wrote it, for messages


def parse_spec(spec: str) -> Spec:
    """Check `file.py:function` (the file exists, the name is a Python name); a ConfigError says what to give."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ConfigError(f"--checker {spec}: give FILE.py:FUNCTION, a Python file and the name of its function "
                          f"`def FUNCTION(input, output) -> bool`, e.g. {EXAMPLE}")
    if not name.isidentifier():
        raise ConfigError(f"--checker {spec}: {name!r} is not a Python function name; give FILE.py:FUNCTION")
    if not Path(path).is_file():
        raise ConfigError(f"--checker {spec}: no file {path}; give the path of your .py file (e.g. {EXAMPLE})")
    return Spec(Path(path).resolve(), name, spec)


class UserFunction:
    """The user's function in its own process; `run` gives a verdict per pair or raises a ConfigError."""

    def __init__(self, spec: Spec, time_limit: float):
        if time_limit <= 0:
            raise ValueError(f"a checker's time limit must be positive, got {time_limit}")
        self.spec, self.time_limit = spec, float(time_limit)
        self._proc: Any = None
        self._conn: Any = None
        self._finalizer: Any = None

    def start(self) -> None:
        """Start the child and load the function there; a file that fails to load is refused here."""
        if self._proc is not None:
            return
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])  # the folder holding trmkit, wherever it is installed
        code = (f"import sys; sys.path.insert(1, {root!r}); from trmkit.tasks.checking import child_main; "
                "child_main()")
        fd = theirs.fileno()
        self._proc = subprocess.Popen(  # its own session: a kill reaches whatever the user's code started too
            [sys.executable, "-c", code, str(fd), str(self.spec.path), self.spec.function], pass_fds=(fd,),
            stdin=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, stop, self._proc, self._conn)
        if not self._conn.poll(LOAD_LIMIT):
            self.close()
            raise ConfigError(f"--checker {self.spec.text}: loading {self.spec.path.name} took more than "
                              f"{LOAD_LIMIT:g} s; keep slow work out of the file's top level")
        kind, detail = self._receive()
        if kind != "ready":
            self.close()
            where = f" while loading {self.spec.path.name}" if kind == "died" else ""
            raise ConfigError(f"--checker {self.spec.text}: {detail}{where}")

    def run(self, pairs: Sequence[tuple[Any, Any]], name_puzzle: Callable[[int], str]) -> list[bool]:
        """The verdict on each (input, output); name_puzzle(i) names pair i in an error ("line 17 of f.jsonl")."""
        if not pairs:
            return []
        self.start()
        self._conn.send(list(pairs))
        verdicts = []
        for i in range(len(pairs)):
            if not self._conn.poll(self.time_limit):
                self.close()  # the call may never end: the child goes, and a next run starts a fresh one
                self._fail(i, name_puzzle, f"ran past its time limit of {self.time_limit:g} s per call",
                           "make it faster, or look for a loop that never ends")
            kind, detail = self._receive()
            if kind == "ok":
                verdicts.append(detail)
                continue
            if kind == "died":
                self.close()
                detail = f"stopped: {detail}"
            self._fail(i, name_puzzle, detail, FIX)
        return verdicts

    def close(self) -> None:
        """Stop the child (idempotent); a later `run` starts a fresh one."""
        if self._finalizer is not None:
            self._finalizer()
        self._proc = self._conn = self._finalizer = None

    def _receive(self) -> tuple[str, Any]:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            try:
                code = self._proc.wait(5.0)
            except subprocess.TimeoutExpired:  # the socket closed but the child lives on (user code closed it)
                return "died", "closed its connection to trmkit and did not exit"
            return "died", f"its process exited (code {code})"

    def _fail(self, i: int, name_puzzle: Callable[[int], str], what: str, fix: str) -> None:
        raise ConfigError(f"checker {self.spec.text} {what} on {name_puzzle(i)}; {fix}")


def stop(proc: Any, conn: Any) -> None:
    """End a checker's child process (the one this module started, with its group) and close its socket."""
    conn.close()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


# ---------------------------------------------------------------- the child


def child_main() -> None:
    """The child's entry (`python -c ...  FD FILE FUNCTION`): prints to stderr, die with the parent, serve."""
    fd, path, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.dup2(2, 1)  # the user's prints: stdout may be the caller's answer (JSON on stdout)
    sys.stdout = sys.stderr
    try:  # Linux: killed when the parent dies, even by kill -9 while a call hangs
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    serve(Connection(fd), path, name)


def serve(conn: Any, path: str, name: str) -> None:
    """The child's loop: load the function, then answer batches of pairs, one reply per pair, until the socket
    closes; the first pair that fails ends its batch (the parent raises on it)."""
    try:
        function = load(path, name)
    except Exception as e:  # noqa: BLE001 - whatever the user's file raises is reported, not a crash
        conn.send(("load_error", f"loading {Path(path).name} failed: {described(e, path)}; fix the file"))
        return
    conn.send(("ready", None))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        for x, y in batch:
            reply = verdict(function, x, y, path)
            conn.send(reply)
            if reply[0] != "ok":
                break


def load(path: str, name: str) -> Callable[[Any, Any], Any]:
    """The function `name` of the Python file at `path`, imported by path (not from sys.path)."""
    import importlib.util

    sys.path.insert(0, str(Path(path).parent))  # as `python FILE` would: modules beside the file import
    spec = importlib.util.spec_from_file_location(f"trmkit_user_checker_{Path(path).stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a Python file (give a .py file)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if not callable(function):
        defined = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise AttributeError(f"it has no function {name!r} (its functions: {', '.join(defined[:10]) or 'none'})")
    return function


def verdict(function: Callable[[Any, Any], Any], x: Any, y: Any, path: str) -> tuple[str, Any]:
    """("ok", bool), or ("raised" | "not_bool", what went wrong) for one call."""
    try:
        result = function(x, y)
    except Exception as e:  # noqa: BLE001 - the user's error, reported with its line
        return "raised", f"raised {described(e, path)}"
    kind = type(result)
    if isinstance(result, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool")):
        return "ok", bool(result)
    text = repr(result)
    text = text if len(text) <= 40 else text[:37] + "..."
    return "not_bool", f"returned {text} (type {kind.__name__}), not True or False"


def described(error: BaseException, path: str) -> str:
    """`Type: message (file.py line N)`, the line the last frame in the user's file."""
    if isinstance(error, SyntaxError):  # its message names the file and line itself
        return f"{type(error).__name__}: {error}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename) == Path(path)]
    where = f" ({Path(path).name} line {frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"
