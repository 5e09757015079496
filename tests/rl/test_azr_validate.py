"""Validation of proposed programs: each rejection with its reason, counted; real seed programs pass."""

import itertools
import sys

import pytest

from tests.rl.test_azr_seeds import real
from trmkit.rl.azr.seeds import read_code_f_seeds, read_io_seeds
from trmkit.rl.azr.validate import Program, Validator, from_code_f_seed, from_io_seed
from trmkit.rl.sandbox import Limits

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the sandbox needs POSIX")

FAST = Limits(cpu_seconds=0.3, wall_seconds=3.0, max_output_chars=200)
REJECTED = {  # program, input -> the rejection key
    "syntax": ("def f(x)\n    return x", "1"),
    "banned_module": ("import os\ndef f(x):\n    return os.getpid()", "1"),
    "module": ("import numpy as np\ndef f(x):\n    return np.sum(x)", "[1]"),
    "name": ("def f(x):\n    return eval(x)", "'1'"),
    "attribute": ("def f(x):\n    return x.__class__.__mro__", "1"),
    "no_function": ("def g(x):\n    return x", "1"),
    "input": ("def f(x):\n    return x", "1, (2"),
    "error": ("def f(x):\n    return x[5]", "[1]"),
    "timeout": ("def f(x):\n    while True:\n        pass", "1"),
    "output": ("from collections import deque\ndef f(x):\n    return deque(x)", "[1]"),
    "nondeterministic": ("import string\ndef f(x):\n    n = getattr(string.capwords, 'calls', 0) + 1\n"
                         "    string.capwords.calls = n\n    return n", "1"),
    "hash_order": ("def f(x):\n    return ''.join({'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'})", "1"),
}


def test_each_rejection_has_its_reason_and_is_counted():
    programs = [Program(src, (inp,), where=key) for key, (src, inp) in REJECTED.items()]
    programs.append(Program("def f(a, b=2):\n    return {'sum': a + b, 'set': {3, 1}}", ("1", "a=1, b=5"), "ok"))
    with Validator(FAST) as validator:
        report = validator.validate(programs)
    assert {r.where: r.key for r in report.rejected} == {k: k for k in REJECTED}
    assert [(v.where, v.outputs) for v in report.valid] == [("ok", ("{'sum': 3, 'set': {1, 3}}",
                                                                   "{'sum': 6, 'set': {1, 3}}"))]
    assert report.counts == {"valid": 1, **{k: 1 for k in REJECTED}}
    reasons = {r.key: r.reason for r in report.rejected}
    assert "module 'os' is banned" in reasons["banned_module"]
    assert "deque is not a Python literal" in reasons["output"]
    assert "hash seed" in reasons["hash_order"]


def test_real_seed_programs_pass():
    io = [from_io_seed(s) for s in itertools.islice(read_io_seeds(real("azr_7b_seed_io.jsonl")), 20)]
    code_f = [from_code_f_seed(s) for s in itertools.islice(read_code_f_seeds(real("azr_7b_code_f_seed_io.jsonl")), 10)]
    with Validator() as validator:
        report = validator.validate(io + code_f)
    assert report.counts["valid"] >= 27, report.rejected
    first = report.valid[0]
    assert (first.inputs, first.outputs) == (('"Hello world"',), ("'Hello world'",))
