"""What generated code may be, checked in this process before anything runs: the AST whitelist.

``check_source`` accepts one small function of ints, bools and lists. No attributes, no names
starting with ``_``, no imports, no ``while``, no strings, no calls except to a dozen builtins
(so no recursion either); see its docstring for the full list. This is the security boundary
of the sandbox (sandbox.py): the worker's limits behind it assume it. ``args_problem`` checks
a job's arguments the same way.

Choices worth knowing: a ``for`` loop may run over a name or over any whitelisted call
(``enumerate(x)``, ``zip(a, b)``), not only ``range``, because the call is checked anyway;
``pass``/``break``/``continue`` are allowed; ``is`` is not (its answer on ints depends on the
interpreter's caches); a name may not rebind a whitelisted builtin (``len = f`` would let
``len(x)`` recurse) nor mention the function itself.
"""

from __future__ import annotations

import ast
import json
from typing import Any

# Calls a job may make; _worker.SAFE_NAMES is the same list (checked at the worker's handshake).
ALLOWED_CALLS = frozenset({"abs", "all", "any", "enumerate", "len", "list", "max", "min",
                           "range", "reversed", "sorted", "sum", "zip"})
ALLOWED_KEYWORDS = frozenset({"reverse"})
MAX_SOURCE_CHARS = 4000
MAX_NODES = 400
MAX_CONSTANT = 10**6
MAX_ARG_ITEMS = 100_000  # list items in one job's arguments, all levels together


class UnsafeCode(ValueError):
    """The source uses something outside the whitelist; the message names the line and what."""


_STATEMENTS = (ast.FunctionDef, ast.Return, ast.Assign, ast.AugAssign, ast.If,
               ast.For, ast.Pass, ast.Break, ast.Continue)
_EXPRESSIONS = (ast.IfExp, ast.ListComp, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare,
                ast.Name, ast.Constant, ast.List, ast.Tuple, ast.Subscript, ast.Slice, ast.Call)
_PARTS = (ast.arguments, ast.arg, ast.keyword, ast.comprehension, ast.Load, ast.Store,
          ast.And, ast.Or)
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub, ast.Not,
              ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn)
_ALLOWED = _STATEMENTS + _EXPRESSIONS + _PARTS + _OPERATORS

_SYMBOLS = {ast.Pow: "**", ast.Div: "/ (no floats: use //)", ast.MatMult: "@", ast.LShift: "<<",
            ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^",
            ast.Invert: "~", ast.UAdd: "unary +", ast.Is: "is (use ==)", ast.IsNot: "is not (use !=)"}
_FORBIDDEN = {
    ast.Import: "import", ast.ImportFrom: "import",
    ast.While: "while loop (loops must be bounded: use for ... in range(...))",
    ast.Lambda: "lambda", ast.GeneratorExp: "generator expression (use a list comprehension)",
    ast.SetComp: "set comprehension", ast.DictComp: "dict comprehension",
    ast.Global: "global statement", ast.Nonlocal: "nonlocal statement",
    ast.Try: "try statement", ast.Raise: "raise statement", ast.With: "with statement",
    ast.Delete: "del statement", ast.JoinedStr: "f-string", ast.FormattedValue: "f-string",
    ast.ClassDef: "class definition", ast.AsyncFunctionDef: "async function",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield",
    ast.NamedExpr: "assignment expression (:=)", ast.Starred: "starred expression (*x)",
    ast.Dict: "dict display", ast.Set: "set display", ast.Assert: "assert statement",
    ast.Expr: "bare expression statement", ast.Del: "del statement",
}


def _describe(node: ast.AST) -> str:
    """A readable name for a node outside the whitelist."""
    if isinstance(node, ast.Attribute):
        return f"attribute access (.{node.attr})"
    if type(node) in _SYMBOLS:
        return f"operator {_SYMBOLS[type(node)]}"
    return _FORBIDDEN.get(type(node), f"{type(node).__name__} node")


def _constant_problem(value: Any) -> str | None:
    """Ints and bools only, ints within +-MAX_CONSTANT (bigger numbers must be computed)."""
    if type(value) is bool:
        return None
    if type(value) is int:
        if abs(value) > MAX_CONSTANT:
            return f"integer constant {value} is out of range (|c| <= {MAX_CONSTANT})"
        return None
    kind = {str: "string", bytes: "bytes", float: "float", complex: "complex"}.get(type(value))
    shown = repr(value) if len(repr(value)) <= 20 else repr(value)[:17] + "..."
    return f"{kind or 'constant'} constant {shown} is not allowed (ints and bools only)"


def _name_problem(name: str, func: str, store: bool) -> str | None:
    """Names: no leading underscore, no self-reference (recursion), no shadowed builtins."""
    if name.startswith("_"):
        return f"name {name!r} is not allowed (names starting with '_' are reserved)"
    if name == func:
        return (f"name {name!r} is not allowed (the function may not refer to itself: "
                "no recursion)")
    if store and name in ALLOWED_CALLS:
        return f"assignment to {name!r} is not allowed (it would shadow a builtin)"
    return None


def _targets_problem(target: ast.AST) -> str | None:
    """Assignment and loop targets are plain names or a flat tuple/list of names."""
    names = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
    if all(isinstance(n, ast.Name) for n in names):
        return None
    return ("assignment to anything but plain names is not allowed "
            "(no x[i] = ..., no x.a = ..., no nested unpacking)")


def _call_problem(node: ast.Call, func: str) -> str | None:
    """Calls go to a whitelisted builtin, by name, with reverse= as the only keyword."""
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if not isinstance(node.func, _ALLOWED) or (name and name.startswith("_")):
        return None  # the callee (an attribute, a lambda, a _name) reports itself, more precisely
    if name is None:
        return "calling a computed expression is not allowed (call a builtin by name)"
    if name == func:
        return f"call to {name!r} is not allowed (the function may not call itself: no recursion)"
    if name not in ALLOWED_CALLS:
        return f"call to {name!r} is not allowed (allowed: {', '.join(sorted(ALLOWED_CALLS))})"
    for kw in node.keywords:
        if kw.arg not in ALLOWED_KEYWORDS:
            shown = "**" if kw.arg is None else f"{kw.arg}="
            return f"keyword argument {shown} is not allowed (only reverse=)"
    return None


def _signature_problem(fn: ast.FunctionDef) -> str | None:
    """Plain positional parameters only: a default would be state shared between calls."""
    a = fn.args
    if fn.decorator_list:
        return "decorators are not allowed"
    if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults:
        return "only plain positional parameters are allowed (no defaults, *args, **kwargs, /, *)"
    if fn.returns or any(arg.annotation for arg in a.args) or getattr(fn, "type_params", None):
        return "annotations are not allowed"
    return None


def _node_problem(node: ast.AST, fn: ast.FunctionDef) -> str | None:
    """The local rule for one node; None when it is allowed."""
    if not isinstance(node, _ALLOWED):
        return f"{_describe(node)} is not allowed"
    if isinstance(node, ast.FunctionDef):
        return "nested function definition is not allowed" if node is not fn else _signature_problem(node)
    if isinstance(node, ast.Name):
        return _name_problem(node.id, fn.name, isinstance(node.ctx, ast.Store))
    if isinstance(node, ast.arg):
        return _name_problem(node.arg, fn.name, store=True)
    if isinstance(node, ast.Constant):
        return _constant_problem(node.value)
    if isinstance(node, ast.Call):
        return _call_problem(node, fn.name)
    if isinstance(node, ast.Assign):
        return next(filter(None, map(_targets_problem, node.targets)), None)
    if isinstance(node, ast.AugAssign) and not isinstance(node.target, ast.Name):
        return "augmented assignment to anything but a plain name is not allowed"
    if isinstance(node, ast.comprehension) and node.is_async:
        return "async comprehension is not allowed"
    if isinstance(node, ast.For) and not isinstance(node.iter, (ast.Name, ast.Call)):
        return "a for loop must run over a name or a call such as range(...)"
    if isinstance(node, (ast.For, ast.comprehension)):
        return _targets_problem(node.target)
    if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
        return "assignment to a subscript is not allowed (build a new list instead)"
    return None


def _single_function(tree: ast.Module, func: str | None) -> ast.FunctionDef:
    """The module must be exactly one function definition (named ``func`` when given)."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        extra = [s for s in tree.body if not isinstance(s, ast.FunctionDef)] or tree.body[1:]
        where = f"line {extra[0].lineno}: " if extra else ""
        raise UnsafeCode(f"{where}the source must define exactly one function and nothing else "
                         f"(found {len(tree.body)} top-level statements)")
    fn = tree.body[0]
    if func is not None and fn.name != func:
        raise UnsafeCode(f"line {fn.lineno}: the function is named {fn.name!r}, "
                         f"but the job calls {func!r}")
    return fn


def check_source(source: str, func: str | None = None) -> None:
    """Raise UnsafeCode unless ``source`` is one whitelisted function (named ``func`` if given).

    Allowed: one ``def`` with plain positional parameters; return, assignment to names (or a
    tuple of names), augmented assignment, if/else, ``x if c else y``, for over a name or a
    call (``range(...)``), list comprehensions with ifs, pass/break/continue; + - * // %,
    unary - and not, and/or, == != < <= > >= in, not in; int and bool constants within
    +-10**6; lists, tuples, subscripts and slices (with step); calls to the builtins in
    ALLOWED_CALLS, with ``reverse=`` as the only keyword.
    Everything else is refused with the line and the construct named, e.g.
    ``line 2: attribute access (.__class__) is not allowed``.
    """
    if not isinstance(source, str):
        raise UnsafeCode(f"source must be a str, got {type(source).__name__}")
    if len(source) > MAX_SOURCE_CHARS:
        raise UnsafeCode(f"source is {len(source)} chars, more than {MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise UnsafeCode(f"line {e.lineno}: syntax error: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise UnsafeCode(f"source cannot be parsed: {type(e).__name__}: {e}") from None
    count = sum(1 for n in ast.walk(tree) if not isinstance(n, ast.expr_context))
    if count > MAX_NODES:
        raise UnsafeCode(f"source has {count} AST nodes, more than {MAX_NODES}")
    fn = _single_function(tree, func)
    problem = _first_problem(fn)
    if problem:
        raise UnsafeCode(problem)


def _first_problem(fn: ast.FunctionDef) -> str | None:
    """Check every node of the function; report the problem that comes first in the text."""
    problems = []  # (position, visit order, message)
    stack = [(fn, (fn.lineno, 0))]
    while stack:
        node, where = stack.pop()
        where = _position(node, where)
        problem = _node_problem(node, fn)
        if problem:  # an ancestor is visited before its descendants, so it wins a tie
            problems.append((where, len(problems), problem))
        stack.extend((child, where) for child in ast.iter_child_nodes(node))
    if not problems:
        return None
    (line, _), _, problem = min(problems)
    return f"line {line}: {problem}"


def _position(node: ast.AST, parent: tuple[int, int]) -> tuple[int, int]:
    """(line, column) where a node shows in the text; nodes without one (operators) take their
    parent's. An attribute is placed at its name, so in ``().__class__.__bases__`` the
    ``.__class__`` comes first."""
    if isinstance(node, ast.Attribute) and node.end_lineno is not None:
        return node.end_lineno, node.end_col_offset - len(node.attr)
    if not hasattr(node, "lineno"):
        return parent
    return node.lineno, node.col_offset


def args_problem(args: Any) -> str | None:
    """Arguments, like results, are ints, bools and (nested) lists/tuples of them, and must
    be writable as JSON (no int with more than 4300 digits)."""
    if not isinstance(args, (tuple, list)):
        return f"args must be a tuple, got {type(args).__name__}"
    stack, items = [args], 0
    while stack:
        v = stack.pop()
        if type(v) in (list, tuple):
            items += len(v)
            if items > MAX_ARG_ITEMS:  # also ends a list that contains itself
                return f"args hold more than {MAX_ARG_ITEMS} items"
            stack.extend(v)
        elif type(v) not in (int, bool):
            return f"unsupported argument type {type(v).__name__} (ints, bools, lists, tuples)"
    try:
        json.dumps(list(args))
    except ValueError as e:
        return f"args cannot be written as JSON: {str(e)[:100]}"
    return None
