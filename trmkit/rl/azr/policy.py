"""What an AZR program may be, checked in this process before it reaches the sandbox's worker.

AZR's programs (Zhao et al., 2025, "Absolute Zero") use strings, dicts, sets, comprehensions,
classes, generators and a few standard modules, far beyond check.py's one function of ints and
lists. This policy is an explicit allowlist, checked on the AST:

- imports only of AZR_MODULES (absolute, no ``*``); os, sys, subprocess, socket, ctypes,
  importlib and the like are named as banned, anything else as not allowed;
- no names starting with ``__`` (``__builtins__``, ``__import__``, ``__loader__``) but
  ``__name__``; no attributes starting with ``__`` but ``__init__``, ``__name__`` and
  ``__class__``; no frame, code or generator internals (``gi_frame``, ``f_globals``, ...),
  nor ``getattr(x, "__globals__")`` and the like with such a name written out;
- no references to the builtins eval, exec, compile, open, input, globals, locals, vars, dir,
  id, breakpoint, help, exit, quit, memoryview (the worker does not have them either), unless
  the program binds the name itself (``def f(input): ...``);
- no async code; no string constant that is a format field reaching an attribute or key that
  starts with ``_`` (``"{0.__class__}"``);
- bounded size (characters and AST nodes); the program defines ``f`` by a top-level ``def``.

The worker (``_worker_azr.AzrMode``) adds what an AST cannot see: fresh module objects that hold
no modules and lack the names that read attributes or evaluate text by a runtime string
(operator.attrgetter, typing.get_type_hints, functools.singledispatch, string.Formatter, ...;
functools.wraps and update_wrapper only with their default attribute lists), getattr and
friends that refuse dunder names, a silent print, a check after every job that it changed no
class the next job shares (``Counter.most_common = ...``: the job fails and the worker is
replaced), and the process limits and audit hook of every sandbox job. What remains possible:
``str.format`` with a format string built at run time can read (never call) an attribute; the
worker's reply is bounded and it holds nothing worth reading (empty environment, empty
directory). A bare ``except:`` can swallow the CPU timer's exception; the kernel's CPU limit or
the wall clock then ends the worker (a "crash" or "timeout" outcome, a fresh worker next).
"""

from __future__ import annotations

import ast
import builtins
import re
from typing import Any

from trmkit.rl import _worker_azr
from trmkit.rl.check import UnsafeCode
from trmkit.rl.sandbox import Policy

# One list each, the worker's (standard library only, loaded by path in the sandbox); the sandbox still
# compares what the worker reports in its handshake with these.
AZR_MODULES = frozenset(_worker_azr.AZR_MODULES)
_PLAIN, _WRAPPED = _worker_azr.AZR_PLAIN, _worker_azr.AZR_WRAPPED
_EXCEPTIONS = tuple(n for n, v in vars(builtins).items()
                    if isinstance(v, type) and issubclass(v, Exception) and not n.startswith("_"))
AZR_BUILTINS = frozenset(_PLAIN + _EXCEPTIONS + _WRAPPED)

# Modules that reach the outside world or the interpreter: their own reason, for the counts.
BANNED_MODULES = frozenset({
    "os", "sys", "subprocess", "socket", "ctypes", "importlib", "shutil", "pathlib", "io",
    "builtins", "multiprocessing", "threading", "signal", "resource", "pickle", "marshal",
    "inspect", "gc", "code", "codeop", "pty", "fcntl", "select", "asyncio", "urllib", "http",
    "ftplib", "tempfile", "glob", "mmap", "posix", "runpy", "types", "random", "time",
    "datetime", "secrets", "hashlib", "platform", "sysconfig", "atexit", "weakref"})
DENIED_NAMES = {
    "eval": "runs text as code", "exec": "runs text as code", "compile": "makes code from text",
    "open": "file access", "input": "reads the terminal", "globals": "interpreter internals",
    "locals": "interpreter internals", "vars": "interpreter internals",
    "dir": "interpreter internals", "id": "differs between runs", "breakpoint": "debugger",
    "help": "interactive", "exit": "ends the interpreter", "quit": "ends the interpreter",
    "memoryview": "raw memory"}
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__class__"})
INTERNAL_ATTRS = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
    "ag_code", "ag_await", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame",
    "tb_next", "co_code", "co_consts", "cell_contents", "f_trace"})
MAX_SOURCE_CHARS = 20_000
MAX_NODES = 6_000
MAX_ARGS_CHARS = 10_000
_FORMAT_FIELD = re.compile(r"\{[^{}]*[.\[]\s*_")  # "{0.__class__}", "{x[__builtins__]}"
_ASYNC = (ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith, ast.Await)
_ATTR_CALLS = frozenset({"getattr", "hasattr", "setattr", "delattr"})


class UnsafeProgram(UnsafeCode):
    """A program outside the AZR policy; ``key`` names the rule for counting (``syntax``,
    ``size``, ``banned_module``, ``module``, ``name``, ``attribute``, ``construct``,
    ``no_function``), the message names the line and what."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def module_problem(name: str | None, level: int = 0) -> tuple[str, str] | None:
    """(key, reason) when a module may not be imported, else None."""
    if level or not name:
        return "module", "relative imports are not allowed"
    if name in AZR_MODULES:
        return None
    if name.partition(".")[0] in BANNED_MODULES:
        return "banned_module", f"module {name!r} is banned (it reaches the outside world or the interpreter)"
    return "module", f"module {name!r} is not allowed (allowed: {', '.join(sorted(AZR_MODULES))})"


def _import_problem(node: ast.Import | ast.ImportFrom) -> tuple[str, str] | None:
    if isinstance(node, ast.ImportFrom):
        if any(a.name == "*" for a in node.names):
            return "module", "'from ... import *' is not allowed (name what you import)"
        return module_problem(node.module, node.level)
    return next(filter(None, (module_problem(a.name) for a in node.names)), None)


def bound_names(tree: ast.AST) -> set[str]:
    """Names the program binds itself (parameters, assignments, defs, classes, imports): a
    parameter called ``input`` is the program's own variable, not the builtin."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).partition(".")[0])
    return names


def _name_problem(name: str, bound: set[str]) -> tuple[str, str] | None:
    if name in DENIED_NAMES and name not in bound:
        return "name", f"name {name!r} is not allowed ({DENIED_NAMES[name]})"
    if name.startswith("__") and name != "__name__":
        return "name", f"name {name!r} is not allowed (names starting with '__' are the interpreter's)"
    return None


def _attribute_problem(attr: str) -> tuple[str, str] | None:
    if attr.startswith("__") and attr not in ALLOWED_DUNDERS:
        return "attribute", f"attribute .{attr} is not allowed (dunder attributes reach the interpreter)"
    if attr in INTERNAL_ATTRS:
        return "attribute", f"attribute .{attr} is not allowed (frame and code internals)"
    return None


def node_problem(node: ast.AST, bound: set[str]) -> tuple[str, str] | None:
    """(key, reason) for one node outside the policy (``bound``: the program's own names), else None."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _import_problem(node)
    if isinstance(node, ast.Name):
        return _name_problem(node.id, bound)
    if isinstance(node, ast.Attribute):
        return _attribute_problem(node.attr)
    if isinstance(node, _ASYNC):
        return "construct", "async code is not allowed"
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _FORMAT_FIELD.search(node.value):
        return "construct", "a format field reaching a name that starts with '_' is not allowed"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTR_CALLS \
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
        return _attribute_problem(str(node.args[1].value))
    return None


def first_problem(tree: ast.AST) -> tuple[str, str] | None:
    """(key, "line N: reason") for the first node outside the policy, in the order of the text."""
    found, bound = [], bound_names(tree)
    for node in ast.walk(tree):
        problem = node_problem(node, bound)
        if problem:
            found.append((_position(node), problem))
    if not found:
        return None
    (line, _), (key, reason) = min(found, key=lambda f: f[0])
    return key, f"line {line}: {reason}"


def _position(node: ast.AST) -> tuple[int, int]:
    """(line, column) where a node shows in the text; an attribute is placed at its name, so in
    ``().__class__.__base__`` the ``.__class__`` comes first."""
    if isinstance(node, ast.Attribute) and node.end_lineno is not None:
        return node.end_lineno, node.end_col_offset - len(node.attr)
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def parse_program(source: Any) -> ast.Module:
    """The module's AST, or UnsafeProgram (``syntax`` or ``size``)."""
    if not isinstance(source, str):
        raise UnsafeProgram("syntax", f"source must be a str, got {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise UnsafeProgram("size", f"source is {len(source)} chars, more than {MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise UnsafeProgram("syntax", f"line {e.lineno}: syntax error: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise UnsafeProgram("syntax", f"source cannot be parsed: {type(e).__name__}: {e}") from None
    count = sum(1 for n in ast.walk(tree) if not isinstance(n, ast.expr_context))
    if count > MAX_NODES:
        raise UnsafeProgram("size", f"source has {count} AST nodes, more than {MAX_NODES}")
    return tree


def check_program(source: str, func: str | None = "f") -> None:
    """Raise UnsafeProgram unless ``source`` is inside the AZR policy and defines ``func`` by a
    top-level ``def``, e.g. ``check_program("import os\\ndef f(x): return x")`` raises
    ``line 1: module 'os' is banned (...)`` with key ``banned_module``."""
    tree = parse_program(source)
    problem = first_problem(tree)
    if problem:
        raise UnsafeProgram(*problem)
    if func is not None and not any(isinstance(s, ast.FunctionDef) and s.name == func for s in tree.body):
        raise UnsafeProgram("no_function", f"the program defines no top-level function {func!r} (def {func}(...))")


def call_problem(text: Any, func: str = "f") -> str | None:
    """What is wrong with ``text`` as the arguments of a call ``f(TEXT)``, or None. The text is
    code the worker evaluates (AZR's inputs are such text: ``'abc', {'k': 1}``, ``x=1, y=2``)."""
    if not isinstance(text, str):
        return f"the call's arguments must be text, got {type(text).__name__}"
    if len(text) > MAX_ARGS_CHARS:
        return f"the call's arguments are {len(text)} chars, more than {MAX_ARGS_CHARS}"
    try:
        tree = ast.parse(f"{func}({text})", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return f"the arguments {text[:60]!r} do not parse: {getattr(e, 'msg', e)}"
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == func):
        return f"the arguments {text[:60]!r} do not make one call {func}(...)"
    problem = first_problem(tree)
    return f"in the arguments, {problem[1]}" if problem else None


def args_problem(args: Any) -> str | None:
    """An AZR job's args are one string, the call's argument text (``call_problem``)."""
    if not (isinstance(args, (tuple, list)) and len(args) == 1):
        return "an AZR job's args are one string: the call's argument text, e.g. (\"[1, 2], 3\",)"
    return call_problem(args[0])


AZR = Policy("azr", AZR_BUILTINS, AZR_MODULES, check_program, args_problem)
