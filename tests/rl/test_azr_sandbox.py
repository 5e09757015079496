"""The AZR policy and worker: hostile programs written "by the LM" are refused or contained, each
scored 0 with its reason, and the sandbox keeps working; ordinary AZR programs run."""

import os
import sys

import pytest

from trmkit.rl.azr.policy import AZR, UnsafeProgram, check_program
from trmkit.rl.azr.tasks import AzrScorer, AzrTask
from trmkit.rl.sandbox import SMALL, Job, Limits, Outcome, Sandbox

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the sandbox needs POSIX")

FAST = Limits(cpu_seconds=0.3, wall_seconds=3.0, memory_bytes=256 * 2**20, max_output_chars=2000)
DOUBLE = "def f(x):\n    return 2 * x"
TASK = AzrTask("induction", DOUBLE, ("1", "2", "3", "4"), ("2", "4", "6", "8"), "double it", shown=3)


def answer(code: str) -> str:
    return f"Here is f:\n```python\n{code}\n```"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(FAST, policy=AZR) as box:
        yield box


def still_works(box: Sandbox) -> None:
    assert box.run([Job(DOUBLE, "f", ("21",))]) == [Outcome("ok", "42")]


def test_azr_programs_run_with_their_imports(sandbox):
    jobs = [
        Job("from collections import Counter\ndef f(s):\n    return dict(Counter(s))", "f", ("'abba'",)),
        Job("import itertools, math, re, functools, heapq, string\n"
            "def f(xs):\n    h = list(xs)\n    heapq.heapify(h)\n"
            "    return (list(itertools.accumulate(xs)), math.gcd(*xs), re.findall('[ab]', 'xaby'),\n"
            "            functools.reduce(lambda a, b: a * b, xs), heapq.heappop(h), string.digits[:3])",
            "f", ("[4, 6, 8]",)),
        Job("class Box:\n    def __init__(self, v):\n        self.v = v\n\n"
            "def f(a, b=1):\n    print('tracing', a)\n    return {Box(a).v + b, 0}, (a,), None, 2.5, b'x'",
            "f", ("a=3, b=4",)),
        Job("import collections.abc\ndef f(x):\n    return isinstance(x, collections.abc.Sequence)", "f", ("[1]",)),
    ]
    assert [o.value for o in sandbox.run(jobs)] == [
        "{'a': 2, 'b': 2}", "([4, 10, 18], 2, ['a', 'b'], 192, 4, '012')",
        "({0, 7}, (3,), None, 2.5, b'x')", "True"]


def test_todays_policy_is_unchanged():
    assert Sandbox().policy is SMALL
    with Sandbox(FAST) as box:
        assert box.run([Job("def f(x):\n    return 'a'", "f", (1,))])[0].kind == "rejected"


# --------------------------------------------------------------------------- hostile programs

HOSTILE = {  # what the LM wrote -> (the status it gets, words of the reason)
    "fork": ("import os\ndef f(x):\n    os.fork()\n    return 2 * x", "rejected", "module 'os' is banned"),
    "subprocess": ("import subprocess\ndef f(x):\n    subprocess.run(['sh'])\n    return 2 * x",
                   "rejected", "module 'subprocess' is banned"),
    "socket": ("import socket\ndef f(x):\n    socket.create_connection(('1.2.3.4', 80))\n    return 2 * x",
               "rejected", "module 'socket' is banned"),
    "importlib": ("from importlib import import_module\ndef f(x):\n    return import_module('os')",
                  "rejected", "module 'importlib' is banned"),
    "file write": ("def f(x):\n    open('out.txt', 'w').write('x')\n    return 2 * x", "rejected",
                   "name 'open' is not allowed"),
    "/etc/passwd": ("def f(x):\n    return open('/etc/passwd').read()", "rejected", "name 'open' is not allowed"),
    "eval": ("def f(x):\n    return eval('2 * x')", "rejected", "name 'eval' is not allowed"),
    "__import__": ("def f(x):\n    return __import__('os').getpid()", "rejected", "name '__import__'"),
    "__builtins__": ("def f(x):\n    return __builtins__['open']('/etc/passwd')", "rejected", "name '__builtins__'"),
    "getattr dunder": ("def f(x):\n    g = getattr(f, '__globals__')\n    return g['__builtins__']",
                       "rejected", "attribute .__globals__ is not allowed"),
    "subclasses": ("def f(x):\n    return ().__class__.__base__.__subclasses__()", "rejected",
                   "attribute .__base__ is not allowed"),
    "frame": ("def f(x):\n    g = (i for i in [x])\n    return g.gi_frame.f_back.f_globals", "rejected",
              "attribute .gi_frame is not allowed"),
    "format field": ("def f(x):\n    return '{0.__class__.__base__}'.format(x)", "rejected", "format field"),
    "async": ("async def g():\n    pass\ndef f(x):\n    return 2 * x", "rejected", "async code"),
    "infinite loop": ("def f(x):\n    while True:\n        x += 1", "timeout", "cpu time limit"),
    "huge output": ("def f(x):\n    return 'a' * 10**7", "output", "output too large"),
    "memory": ("def f(x):\n    return len(bytearray(2**30))", "memory", "MemoryError"),
    "private module attribute": ("import collections\ndef f(x):\n    return collections._sys.modules",
                                 "error", "has no attribute '_sys'"),
    "runtime getattr": ("def f(x):\n    name = '_' * 2 + 'globals' + '_' * 2\n    return getattr(f, name)",
                        "error", "attribute '__globals__' is not allowed"),
    "hidden Formatter": ("from string import Formatter\ndef f(x):\n    return 2 * x", "error",
                         "cannot import name 'Formatter'"),
    "update_wrapper": ("import functools\nbox = []\nclass Grab:\n    def __setattr__(self, name, value):\n"
                       "        box.append(value)\ndef f(x):\n"
                       "    functools.update_wrapper(Grab(), print, assigned=['_' * 2 + 'globals' + '_' * 2])\n"
                       "    return box[0]['os']", "error", "unexpected keyword argument 'assigned'"),
    "wraps partial": ("import functools\ndef f(x):\n    return functools.wraps(print).func", "error",
                      "has no attribute 'func'"),
    "singledispatch": ("from functools import singledispatch\ndef f(x):\n    return 2 * x", "error",
                       "cannot import name 'singledispatch'"),
    "patch a shared class": ("from collections import Counter\ndef f(x):\n"
                             "    Counter.most_common = lambda self, n=None: []\n    return 2 * x",
                             "error", "changed collections.Counter"),
    "register with an ABC": ("import collections.abc\ndef f(x):\n"
                             "    collections.abc.Hashable.register(list)\n    return 2 * x",
                             "error", "changed the ABC collections.abc.Hashable"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_programs_score_0_with_their_reason(sandbox, name):
    code, status, words = HOSTILE[name]
    scorer = AzrScorer(sandbox)
    [verdict] = scorer.score([(TASK, answer(code))])
    assert (verdict.score, verdict.status) == (0.0, status), verdict
    assert words in verdict.reason
    assert scorer.counts[status] == 1
    still_works(sandbox)


def test_an_except_that_swallows_the_timer_is_still_stopped():
    code = ("def f(x):\n    while True:\n        try:\n            while True:\n                pass\n"
            "        except:\n            pass")
    with Sandbox(Limits(cpu_seconds=0.2, wall_seconds=1.0), policy=AZR) as box:
        [verdict] = AzrScorer(box).score([(TASK, answer(code))])
        assert verdict.score == 0.0 and verdict.status in ("crash", "timeout"), verdict
        still_works(box)


def test_print_does_not_reach_the_protocol(sandbox):
    code = "def f(x):\n    for i in range(1000):\n        print('{\"id\": 1}' * 100)\n    return 2 * x"
    [verdict] = AzrScorer(sandbox).score([(TASK, answer(code))])
    assert verdict.status == "right"


@pytest.mark.parametrize("code, words", [
    ("def f(x):\n    return print.__globals__['sys'].modules['os'].fork()", "sandbox: 'os.fork' is not allowed"),
    ("def f(x):\n    return print.__globals__['builtins'].open('/etc/passwd')", "sandbox: 'open' is not allowed"),
    ("def f(x):\n    return print.__globals__['builtins'].__import__('socket')", "sandbox: 'import' is not allowed"),
    ("def f(x):\n    return __import__('os').system('true')", "module 'os' is not allowed"),
    ("def f(x):\n    return open('/etc/passwd').read()", "name 'open' is not defined"),
    ("def f(x):\n    return __import__('string').Formatter", "has no attribute 'Formatter'"),
])
def test_without_the_ast_check_the_worker_still_contains(code, words):
    """The worker's own walls (module proxies, missing builtins, the audit hook), shown by
    turning the AST check off, which only tests may do."""
    with Sandbox(FAST, check_ast=False, policy=AZR) as box:
        [outcome] = box.run([Job(code, "f", ("1",))])
        assert outcome.kind == "error" and words in outcome.reason, outcome
        still_works(box)


def test_an_input_is_checked_like_the_program(sandbox):
    [outcome] = sandbox.run([Job(DOUBLE, "f", ("__import__('os')",))])
    assert outcome.kind == "rejected" and "in the arguments" in outcome.reason
    [outcome] = sandbox.run([Job(DOUBLE, "f", ("1), (2",))])
    assert outcome.kind == "rejected"


def test_a_parameter_may_use_a_builtins_name():
    check_program("def f(input):\n    return input + 1")
    with pytest.raises(UnsafeProgram, match="name 'input'") as e:
        check_program("def f(x):\n    return input()")
    assert e.value.key == "name"


def test_no_worker_is_left_behind():
    box = Sandbox(FAST, policy=AZR)
    box.run([Job(DOUBLE, "f", ("1",))])
    pid = box.worker_pid
    box.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("body, words", [
    ("x = []\n    x.append(x)\n    return x", "nested more than 30 levels"),
    ("return 10**5000", "cannot be written"),
    ("return [[1] * 10] * 10000", "more than max_output_chars=2000"),
    ("return frozenset({1})", "frozenset is not a Python literal"),
    ("return float('nan')", "nan or inf"),
    ("return (i for i in [1])", "generator is not a Python literal"),
])
def test_results_must_be_small_literals(sandbox, body, words):
    [outcome] = sandbox.run([Job(f"def f(x):\n    {body}", "f", ("1",))])
    assert outcome.kind == "output" and words in outcome.reason, outcome


def test_results_are_written_so_literal_eval_reads_them(sandbox):
    [outcome] = sandbox.run([Job("def f(s):\n    return {s: {'z', 'a', 'm'}}, (s,), set(), -0.0, 1e300, 2j",
                                 "f", ("'é\\x00'",))])
    assert outcome.value == "({'é\\x00': {'a', 'm', 'z'}}, ('é\\x00',), set(), -0.0, 1e+300, 2j)"


def test_a_patched_class_does_not_reach_the_next_job(sandbox):
    patch = ("from collections import Counter\ndef f(x):\n"
             "    Counter.most_common = lambda self, n=None: []\n    return 1")
    use = "from collections import Counter\ndef f(x):\n    return Counter(x).most_common()"
    first, second = sandbox.run([Job(patch, "f", ("1",)), Job(use, "f", ("'aab'",))])
    assert first.kind == "error" and second == Outcome("ok", "[('a', 2), ('b', 1)]")
