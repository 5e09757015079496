"""The sandbox worker's AZR mode: programs in the Absolute Zero Reasoner's formats.

Loaded by ``_worker.py`` from its own folder when the config's ``"policy"`` is ``"azr"``, before the
audit hook is installed; standard library only, like the worker. The parent checks every
program first with trmkit.rl.azr.policy, which lists the same modules and builtins (the sandbox
compares them with the worker's handshake). What this mode adds to the worker's process limits
and audit hook: a wider set of builtins, imports of allowlisted modules (pre-imported here and
handed out as fresh module objects holding no modules), getattr and friends refusing dunder
names, a silent print, the call's argument text evaluated under the CPU timer, a check that no
job changed a class the next job shares, and the result written as the text of a Python literal.
"""

import builtins
import json
import math
import sys


class BadOutput(Exception):
    """The job's result is not a small Python literal."""


# Modules a program may import, imported here before the audit hook. A job never sees a real
# module: each import gives a fresh module object holding the module's public names, minus
# modules (``typing.sys``) and the names in AZR_HIDDEN.
AZR_MODULES = ("array", "bisect", "cmath", "collections", "collections.abc", "copy", "decimal",
               "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "re",
               "statistics", "string", "textwrap", "typing", "unicodedata")
AZR_HIDDEN = frozenset({
    "attrgetter", "methodcaller",            # operator: attribute reads by runtime names
    "get_type_hints", "ForwardRef", "get_overloads",  # typing: evaluates annotation strings
    "singledispatch", "singledispatchmethod",  # functools: register() evaluates annotation strings
    "reveal_type",                           # typing: writes to the worker's stderr
    "Formatter",                             # string: get_field returns attributes by runtime names
    "dispatch_table",                        # copy: a dict shared by every job (copyreg's)
    "DefaultContext", "BasicContext", "ExtendedContext",  # decimal: templates shared by every job
    "EXCLUDED_ATTRIBUTES",                   # typing: a list its protocol checks read
})
AZR_PLAIN = ("abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
             "classmethod", "complex", "dict", "divmod", "enumerate", "filter", "float", "format",
             "frozenset", "hash", "hex", "int", "isinstance", "issubclass", "iter", "len", "list",
             "map", "max", "min", "next", "object", "oct", "ord", "pow", "property", "range",
             "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum",
             "super", "tuple", "type", "zip", "NotImplemented", "Ellipsis")
AZR_WRAPPED = ("__build_class__", "__import__", "print", "getattr", "hasattr", "setattr", "delattr")
# Attributes a job may not name at run time either (getattr and friends); the parent's check
# refuses the same in the source.
AZR_INTERNAL_ATTRS = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
    "ag_code", "ag_await", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame",
    "tb_next", "co_code", "co_consts", "cell_contents", "f_trace"})
LITERAL_DEPTH = 30  # nesting of a result (each level takes three frames of the recursion limit)


def exception_names() -> tuple:
    """The builtin exception classes a job may raise and catch (not BaseException's others)."""
    return tuple(sorted(n for n, v in vars(builtins).items()
                        if isinstance(v, type) and issubclass(v, Exception) and not n.startswith("_")))


def internal_attr(name) -> bool:
    return not isinstance(name, str) or name.startswith("__") or name in AZR_INTERNAL_ATTRS


def exposed_names(module) -> dict:
    """The names a job sees of one module."""
    return {n: v for n, v in vars(module).items()
            if not n.startswith("_") and n not in AZR_HIDDEN and type(v) is not type(sys)}


class AzrMode:
    """Run ``f(ARGS)`` for an AZR program; the result comes back as the text of a Python literal."""

    name = "azr"
    modules = AZR_MODULES
    bad_output = BadOutput

    def __init__(self):
        for name in AZR_MODULES:
            __import__(name)
        self.tables = {name: exposed_names(sys.modules[name]) for name in AZR_MODULES}
        self.tables["functools"].update(safe_wrappers(sys.modules["functools"].update_wrapper))
        self.shared = SharedClasses(self.tables)
        self.exceptions = exception_names()
        self.builtins = AZR_PLAIN + self.exceptions + AZR_WRAPPED
        self.decimal = sys.modules["decimal"]

    def compile(self, job: dict):
        args = job["args"]
        if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], str)):
            raise ValueError("an AZR job's args are one string: the call's argument text")
        call = f"{job['func']}({args[0]})"
        return compile(job["source"], "<job>", "exec"), compile(call, "<input>", "eval")

    def run(self, compiled, job: dict, timer):  # timer: _worker.Timer
        code, call = compiled
        namespace = {"__builtins__": self.fresh_builtins(), "__name__": "azr_program"}
        self.decimal.setcontext(self.decimal.Context())  # a job may have changed the last one's
        timer.start()
        try:
            exec(code, namespace)
            if not callable(namespace.get(job["func"])):
                raise NameError(f"the source defines no function {job['func']!r}")
            return eval(call, namespace)
        finally:
            timer.stop()

    def encode(self, value, max_chars: int) -> str:
        return json.dumps(literal_text(value, max_chars), ensure_ascii=False)

    def changed(self) -> str | None:
        return self.shared.changed()

    def fresh_builtins(self) -> dict:
        """Builtins for one run: the plain ones, guarded attribute access, a silent print."""
        names = {n: getattr(builtins, n) for n in AZR_PLAIN + self.exceptions}
        names.update(__build_class__=builtins.__build_class__, __import__=self.importer(),
                     print=lambda *a, **k: None, getattr=guarded(getattr),
                     hasattr=guarded(hasattr), setattr=guarded(setattr), delattr=guarded(delattr))
        return names

    def importer(self):
        """``__import__`` for one run: allowlisted modules only, each a fresh module object."""
        made = {}

        def module(name):
            if name not in made:
                made[name] = m = type(sys)(name)
                vars(m).update(self.tables[name])
                for sub in AZR_MODULES:  # import collections.abc: collections.abc is an attribute
                    if sub.startswith(name + ".") and "." not in sub[len(name) + 1:]:
                        setattr(m, sub[len(name) + 1:], module(sub))
            return made[name]

        def azr_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level != 0 or name not in self.tables:
                raise ImportError(f"sandbox: module {name!r} is not allowed")
            return module(name) if fromlist else module(name.partition(".")[0])
        return azr_import


class SharedClasses:
    """The allowlisted modules' Python classes are shared by every job in this worker: a job could
    patch ``Counter.most_common`` or ``Hashable.register(list)`` and change the next job's
    results. Their namespaces (and ABC registries) are recorded at start and compared after
    every job; a change ends the job as an error whose reply asks the parent to replace this
    worker (``"retire": true``), so the next job gets a fresh one."""

    HEAP, IMMUTABLE = 1 << 9, 1 << 8  # Py_TPFLAGS_HEAPTYPE, Py_TPFLAGS_IMMUTABLETYPE

    def __init__(self, tables: dict):
        abc = sys.modules["abc"]
        self.dump = abc._get_dump
        found = {c for table in tables.values() for v in table.values() if isinstance(v, type)
                 for c in v.__mro__ if c.__flags__ & self.HEAP and not c.__flags__ & self.IMMUTABLE}
        self.saved = {c: dict(vars(c)) for c in found}
        self.abcs = {c: self.registered(c) for c in found if isinstance(c, abc.ABCMeta)}

    def registered(self, cls) -> set:
        """Ids of the classes registered with an ABC, but the job's own (they die with the job)."""
        refs = self.dump(cls)[0]
        return {c for c in (r() for r in refs) if c is not None  # id() is an audited event
                and getattr(c, "__module__", None) != "azr_program"}

    def changed(self) -> str | None:
        """The name of a shared class a job changed, or None."""
        for cls, saved in self.saved.items():
            now = vars(cls)
            if len(now) != len(saved) or any(now.get(k, now) is not v for k, v in saved.items()):
                return f"{cls.__module__}.{cls.__qualname__}"
        for cls, known in self.abcs.items():
            if self.registered(cls) - known:
                return f"the ABC {cls.__module__}.{cls.__qualname__} (register)"
        return None


def safe_wrappers(update_wrapper) -> dict:
    """functools.update_wrapper and wraps with their default attribute lists only: given
    ``assigned=["__globals__"]`` the real ones read any attribute by a runtime name. This wraps
    returns a closure, not a partial, whose ``.func`` would be the real update_wrapper."""
    def safe_update_wrapper(wrapper, wrapped):
        return update_wrapper(wrapper, wrapped)

    def wraps(wrapped):
        def decorate(wrapper):
            return update_wrapper(wrapper, wrapped)
        return decorate
    return {"update_wrapper": safe_update_wrapper, "wraps": wraps}


def guarded(fn):
    """getattr and friends, refusing dunder and interpreter-internal attribute names."""
    def attr(obj, name, *rest):
        if internal_attr(name):
            raise AttributeError(f"sandbox: attribute {name!r} is not allowed")
        return fn(obj, name, *rest)
    attr.__name__ = fn.__name__
    return attr


def literal_text(value, max_chars: int) -> str:
    """The result as the text of a Python literal (ast.literal_eval reads it back), or BadOutput.
    Exact types only; sets are written with their items sorted, so the text does not depend on
    the hash seed."""
    budget = [max_chars, max_chars]  # chars left, the limit
    return "".join(_literal(value, budget, 0))


def _spend(text: str, budget: list) -> str:
    budget[0] -= len(text)
    if budget[0] < 0:
        raise BadOutput(f"output too large: more than max_output_chars={budget[1]} chars as a literal")
    return text


def _literal(v, budget: list, depth: int) -> list:
    if depth > LITERAL_DEPTH:
        raise BadOutput(f"output nested more than {LITERAL_DEPTH} levels deep")
    t = type(v)
    if t in (str, bytes) and len(v) > budget[0]:
        raise BadOutput(f"output too large: a string longer than max_output_chars={budget[1]}")
    if v is None or t in (bool, int, str, bytes):
        try:
            return [_spend(repr(v), budget)]
        except ValueError as e:  # an int with more than 4300 digits
            raise BadOutput(f"output cannot be written: {str(e)[:100]}") from None
    if t in (float, complex):
        if v != v or v in (float("inf"), float("-inf")) or (t is complex and not (
                math.isfinite(v.real) and math.isfinite(v.imag))):
            raise BadOutput("output holds nan or inf, which is not a Python literal")
        return [_spend(repr(v), budget)]
    if t in (list, tuple, set, dict):
        return _container(v, budget, depth)
    raise BadOutput(f"output of type {t.__name__} is not a Python literal "
                    "(None, bool, int, float, complex, str, bytes, list, tuple, set, dict)")


def _container(v, budget: list, depth: int) -> list:
    t = type(v)
    if t is dict:
        items = [_literal(k, budget, depth + 1) + [_spend(": ", budget)] + _literal(x, budget, depth + 1)
                 for k, x in v.items()]
    else:
        items = [_literal(x, budget, depth + 1) for x in v]
    texts = ["".join(i) for i in items]
    if t is set:
        if not texts:
            return [_spend("set()", budget)]
        texts.sort()
    open_, close = {list: "[]", tuple: "()", set: "{}", dict: "{}"}[t]
    tail = "," if t is tuple and len(texts) == 1 else ""
    _spend(", " * max(len(texts) - 1, 0), budget)
    return [_spend(open_, budget), ", ".join(texts), _spend(tail + close, budget)]
