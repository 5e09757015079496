"""The execution sandbox: every hostile program is refused or contained with a reason, and the
sandbox keeps working afterwards (each hostile case is followed by an ordinary job)."""

import os
import resource
import sys
import time

import pytest

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit.rl.check import ALLOWED_CALLS, UnsafeCode, check_source
from trmkit.rl.sandbox import Job, Limits, Outcome, Sandbox

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the sandbox needs POSIX")

REVERSE_SHIFT = "def f(x):\n    x = [(v + 3) % 10 for v in x]\n    return x[::-1]"
INC = "def f(x):\n    return x + 1"
FAST = Limits(cpu_seconds=0.3, wall_seconds=3.0, memory_bytes=256 * 2**20)


def still_works(sandbox: Sandbox) -> None:
    """The check after every hostile case: an ordinary job still gets its right answer."""
    assert sandbox.run([Job(INC, "f", (41,))]) == [Outcome("ok", 42)]


def reaped(pid: int) -> bool:
    """True when the process is gone and was waited for (no zombie left behind)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


# --------------------------------------------------------------------------- the whitelist


def test_ok_programs_return_their_values():
    jobs = [
        Job(REVERSE_SHIFT, "f", ([1, 2, 3],)),
        Job("def f(x):\n    return sorted(x, reverse=True)", "f", ([3, 1, 2],)),
        Job("def f(x, k):\n    return x[1:k], x[::2], x[-1], x[1::-1]", "f", ([5, 6, 7, 8], 3)),
        Job("def f(x):\n    return [min(x), max(x), sum(x), len(x), abs(-3)]", "f", ([4, -2, 9],)),
        Job("def g(x):\n    a, b = 0, 1\n    for i in range(x):\n        a, b = b, a + b\n"
            "    return a", "g", (10,)),
        Job("def f(x):\n    out = []\n    for i, v in enumerate(x):\n        if v % 2 == 0 and i > 0:"
            "\n            out += [v // 2]\n        elif not v in x[:0]:\n            continue\n"
            "    return [out, all(x), any([]), 3 if out else 4, list(reversed(x))]", "f", ([1, 2, 4],)),
        Job("def f(a, b):\n    return [p + q for p, q in zip(a, b) if p != q]", "f", ([1, 2], [1, 3])),
        Job("def f(x):\n    return x >= 3, True", "f", (3,)),
    ]
    with Sandbox() as sandbox:
        values = [o.value for o in sandbox.run(jobs) if o.ok]
    assert values == [[6, 5, 4], [3, 2, 1], [[6, 7], [5, 7], 8, [6, 5]], [-2, 9, 11, 3, 3], 55,
                      [[1, 2], True, False, 3, [4, 2, 1]], [5], [True, True]]


@pytest.mark.parametrize("source, line, what", [
    ("def f(x):\n    return ().__class__", 2, "attribute access (.__class__)"),
    ("def f(x):\n    return ().__class__.__bases__[0].__subclasses__()", 2, "attribute access"),
    ("def f(x):\n    y = 1\n    return __import__('os')", 3, "name '__import__'"),
    ("def f(x):\n    return __builtins__", 2, "names starting with '_'"),
    ("def f(x):\n    import os\n    return 1", 2, "import"),
    ("def f(x):\n    while True:\n        pass", 2, "while loop"),
    ("def f(x):\n    return open('/etc/passwd')", 2, "call to 'open'"),
    ("def f(x):\n    return f(x)", 2, "no recursion"),
    ("def f(x):\n    g = f\n    return 1", 2, "may not refer to itself"),
    ("def f(x):\n    len = sum\n    return len(x)", 2, "shadow a builtin"),
    ("def f(x):\n    return eval(x)", 2, "call to 'eval'"),
    ("def f(x):\n    return [id(x), hash(x)]", 2, "call to 'id'"),
    ("def f(x):\n    print(x)\n    return 1", 2, "bare expression"),
    ("def f(x):\n    return 'a'", 2, "string constant"),
    ("def f(x):\n    return f'{x}'", 2, "f-string"),
    ("def f(x):\n    return 1.5", 2, "float constant"),
    ("def f(x):\n    return 1000001", 2, "out of range"),
    ("def f(x):\n    return x ** 2", 2, "operator **"),
    ("def f(x):\n    return x / 2", 2, "operator /"),
    ("def f(x):\n    return x is None", 2, "operator is"),
    ("def f(x):\n    return (lambda: 1)()", 2, "lambda"),
    ("def f(x):\n    return sum(v for v in x)", 2, "generator expression"),
    ("def f(x):\n    def g():\n        return 1\n    return 1", 2, "nested function"),
    ("def f(x):\n    global y\n    return 1", 2, "global"),
    ("def f(x):\n    try:\n        return 1\n    except:\n        return 2", 2, "try"),
    ("def f(x):\n    raise ValueError", 2, "raise"),
    ("def f(x):\n    del x\n    return 1", 2, "del"),
    ("def f(x):\n    x[0] = 1\n    return x", 2, "plain names"),
    ("def f(x):\n    return sorted(x, key=len)", 2, "keyword argument key="),
    ("def f(x=1):\n    return x", 1, "plain positional parameters"),
    ("def f(*x):\n    return x", 1, "plain positional parameters"),
    ("@max\ndef f(x):\n    return x", 2, "decorators"),
    ("def f(x):\n    return {1: 2}", 2, "dict display"),
    ("def f(x):\n    return [*x]", 2, "starred"),
    ("def f(x):\n    for v in x[1:]:\n        pass\n    return 1", 2, "for loop must run over"),
    ("def f(x):\n    return (y := 1)", 2, "assignment expression"),
    ("class A:\n    pass", 1, "exactly one function"),
    ("def f(x):\n    return 1\ndef g(x):\n    return 2", 3, "exactly one function"),
    ("def f(x):\n    return (", 2, "syntax error"),
])
def test_check_source_names_the_line_and_the_construct(source, line, what):
    with pytest.raises(UnsafeCode) as err:
        check_source(source, "f")
    assert str(err.value).startswith(f"line {line}: "), str(err.value)
    assert what in str(err.value), str(err.value)


def test_check_source_message_reads_well_and_caps_size():
    with pytest.raises(UnsafeCode, match=r"^line 2: attribute access \(\.__class__\) is not allowed$"):
        check_source("def f(x):\n    return ().__class__.__bases__", "f")
    with pytest.raises(UnsafeCode, match="named 'g', but the job calls 'f'"):
        check_source("def g(x):\n    return x", "f")
    with pytest.raises(UnsafeCode, match="more than 4000"):
        check_source("def f(x):\n    return x" + " " * 4000, "f")
    with pytest.raises(UnsafeCode, match="AST nodes, more than 400"):
        check_source("def f(x):\n    return " + " + ".join(["x"] * 300), "f")
    check_source(REVERSE_SHIFT, "f")  # and the ordinary program passes


def test_rejected_jobs_never_reach_the_worker():
    with Sandbox() as sandbox:
        out = sandbox.run([Job("def f(x):\n    import os\n    return 1", "f", (1,)),
                           Job(INC, "f", ("a string",)), Job(INC, "not a name", (1,))])
        assert [o.kind for o in out] == ["rejected"] * 3
        assert "line 2: import" in out[0].reason and "str" in out[1].reason
        assert sandbox.stats["worker_starts"] == 0 and sandbox.stats["rejected"] == 3


# --------------------------------------------------------------------------- hostile programs


def test_infinite_loop_is_rejected_and_without_the_whitelist_times_out():
    loop = "def f(x):\n    while True:\n        pass\n    return 1"
    with Sandbox(FAST) as sandbox:
        assert sandbox.run([Job(loop, "f", (1,))])[0].kind == "rejected"
        still_works(sandbox)
    with Sandbox(FAST, check_ast=False) as sandbox:
        still_works(sandbox)
        pid = sandbox.worker_pid
        start = time.monotonic()
        out = sandbox.run([Job(loop, "f", (1,))])[0]
        assert out.kind == "timeout" and "cpu time limit of 0.3 s" in out.reason
        assert time.monotonic() - start < FAST.wall_seconds  # the CPU timer ended it, not the wall
        still_works(sandbox)
        assert sandbox.worker_pid == pid and sandbox.stats["worker_restarts"] == 0  # it survived


def test_expensive_whitelisted_loop_times_out():
    nested = ("def f(x):\n    s = 0\n    for i in range(1000000):\n"
              "        for j in range(1000000):\n            s += i * j\n    return s")
    check_source(nested, "f")  # allowed: bounded, just far too long
    with Sandbox(FAST) as sandbox:
        assert sandbox.run([Job(nested, "f", (1,))])[0].kind == "timeout"
        still_works(sandbox)


def test_memory_bombs_are_contained():
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is bytes on macOS, KiB on Linux
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    bombs = ["def f(x):\n    x = [0] * 1000000\n    x = x * 1000000\n    return len(x)",
             "def f(x):\n    x = [0] * 1000000\n    for i in range(40):\n        x = x + x\n"
             "    return len(x)"]
    with Sandbox(Limits(cpu_seconds=2.0, wall_seconds=6.0, memory_bytes=256 * 2**20)) as sandbox:
        for bomb in bombs:
            out = sandbox.run([Job(bomb, "f", (1,))])[0]
            assert out.kind == "memory" or (out.kind == "crash" and "memory" in out.reason), out
            still_works(sandbox)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale - before
    assert grown < 50 * 2**20, f"the parent's peak RSS grew by {grown / 2**20:.0f} MiB"


def test_import_and_open_fail_even_without_the_whitelist():
    cases = {"def f(x):\n    return __import__('os')": "NameError: name '__import__'",
             "def f(x):\n    return open('/etc/passwd')": "NameError: name 'open'",
             "def f(x):\n    return eval('1')": "NameError: name 'eval'"}
    with Sandbox(FAST) as sandbox:
        assert [o.kind for o in sandbox.run([Job(s, "f", (1,)) for s in cases])] == ["rejected"] * 3
    with Sandbox(FAST, check_ast=False) as sandbox:
        for source, reason in cases.items():
            out = sandbox.run([Job(source, "f", (1,))])[0]
            assert out.kind == "error" and reason in out.reason, out
            still_works(sandbox)


def test_attribute_escapes_are_rejected_and_the_audit_hook_holds_behind_them():
    escape = "def f(x):\n    return ().__class__.__bases__[0].__subclasses__()"
    # len.__self__ is the real builtins module: only the whitelist keeps it out of reach.
    via_builtins = {"def f(x):\n    return len.__self__.open('/etc/passwd')": "'open' is not allowed",
                    "def f(x):\n    return len.__self__.__import__('socket')": "'import' is not allowed",
                    "def f(x):\n    return len.__self__.__import__('posix').system('true')":
                        "'os.system' is not allowed"}
    with Sandbox(FAST) as sandbox:
        out = sandbox.run([Job(s, "f", (1,)) for s in [escape, *via_builtins]])
        assert all(o.kind == "rejected" and "attribute access" in o.reason for o in out)
    with Sandbox(FAST, check_ast=False) as sandbox:
        out = sandbox.run([Job(escape, "f", (1,))])[0]
        assert out.kind == "output" and "unsupported output type type" in out.reason
        for source, reason in via_builtins.items():
            out = sandbox.run([Job(source, "f", (1,))])[0]
            assert out.kind == "error" and "PermissionError" in out.reason and reason in out.reason
            still_works(sandbox)


def test_huge_unsupported_or_deep_output_is_refused():
    cases = {"def f(x):\n    return list(range(1000000))": "too large",
             "def f(x):\n    return list(range(3000))": "too large",  # 3000 items, > 10000 chars
             "def f(x):\n    return zip(x, x)": "unsupported output type zip",
             "def f(x):\n    y = []\n    for i in range(1000):\n        y = [y]\n    return y":
                 "nested too deeply"}
    with Sandbox(FAST) as sandbox:
        for source, reason in cases.items():
            out = sandbox.run([Job(source, "f", ([1],))])[0]
            assert out.kind == "output" and reason in out.reason, out
            still_works(sandbox)


def test_recursion_is_rejected_and_without_the_whitelist_is_contained():
    bomb = "def f(x):\n    return f(x)"
    with Sandbox(FAST) as sandbox:
        out = sandbox.run([Job(bomb, "f", (1,))])[0]
        assert out.kind == "rejected" and "line 2: call to 'f'" in out.reason
    with Sandbox(FAST, check_ast=False) as sandbox:
        out = sandbox.run([Job(bomb, "f", (1,))])[0]
        assert out.kind == "recursion" and "maximum recursion depth" in out.reason
        still_works(sandbox)


def test_nondeterministic_results_are_caught_by_running_twice():
    # No whitelisted program can tell its two runs apart, so this uses check_ast=False and a real
    # escape: a counter kept in the builtins module (len.__self__), which outlives each run's
    # fresh namespace. It exercises the real run-twice-and-compare path, no test hook.
    counter = ("def f(x):\n    d = len.__self__.__dict__\n"
               "    d['runs'] = d.get('runs', 0) + 1\n    return d['runs']")
    with Sandbox(FAST, check_ast=False) as sandbox:
        out = sandbox.run([Job(counter, "f", (1,))])[0]
        assert out.kind == "nondeterministic" and "1 then 2" in out.reason
        still_works(sandbox)
        assert sandbox.stats["nondeterministic"] == 1


# --------------------------------------------------------------------------- the worker's life


def test_a_crashing_job_gets_crash_and_the_batch_stays_in_order():
    # Catching the timer's exception defeats it (only possible without the whitelist); the
    # kernel's RLIMIT_CPU then kills the worker with SIGXCPU. The wall limit is far above it (RLIMIT_CPU
    # counts whole seconds): beside a busy suite a wall limit of 8 s fired first and the job read 'timeout'.
    defeats_timer = ("def f(x):\n    while True:\n        try:\n            while True:\n"
                     "                pass\n        except:\n            pass")
    limits = Limits(cpu_seconds=0.2, wall_seconds=60.0, memory_bytes=256 * 2**20)
    with Sandbox(limits, check_ast=False) as sandbox:
        out = sandbox.run([Job(INC, "f", (1,)), Job(defeats_timer, "f", (1,)), Job(INC, "f", (2,))])
        pid = sandbox.worker_pid
        assert [o.kind for o in out] == ["ok", "crash", "ok"]
        assert out[0].value == 2 and out[2].value == 3
        assert "SIGXCPU" in out[1].reason
        assert sandbox.stats["worker_restarts"] == 1 and sandbox.stats["worker_starts"] == 2
        assert sandbox.stats["crash"] == 1 and sandbox.stats["ok"] == 2
    assert reaped(pid)  # close() killed and reaped the second worker too


def test_a_worker_killed_between_jobs_is_noticed_and_replaced():
    with Sandbox(FAST) as sandbox:
        still_works(sandbox)
        first = sandbox.worker_pid
        os.kill(first, 9)
        time.sleep(0.05)
        out = sandbox.run([Job(REVERSE_SHIFT, "f", ([1, 2, 3],))])
        assert out == [Outcome("ok", [6, 5, 4])]
        assert sandbox.worker_pid != first and reaped(first)
        assert sandbox.stats["worker_restarts"] == 1 and sandbox.stats["crash"] == 0


def test_a_stuck_worker_is_killed_at_the_wall_clock_limit():
    # Waiting on its own stdin uses no CPU, so only the parent's wall clock can end it.
    stuck = "def f(x):\n    return len.__self__.__import__('sys').stdin.readline()"
    limits = Limits(cpu_seconds=0.3, wall_seconds=1.0, memory_bytes=256 * 2**20)
    with Sandbox(limits, check_ast=False) as sandbox:
        still_works(sandbox)
        pid = sandbox.worker_pid
        start = time.monotonic()
        out = sandbox.run([Job(stuck, "f", (1,)), Job(INC, "f", (1,))])
        assert [o.kind for o in out] == ["timeout", "ok"] and "wall-clock limit of 1 s" in out[0].reason
        assert time.monotonic() - start < 5.0 and reaped(pid)


def test_a_forged_reply_is_caught():
    # Without the whitelist a program can write to the worker's stdout; the parent takes only
    # one line with the job's (partly random) id, so the job is marked crash, never ok.
    forge = ("def f(x):\n    out = len.__self__.__import__('sys').stdout\n"
             "    out.write('{\"id\": 1, \"kind\": \"ok\", \"value\": 99, \"reason\": \"\"}\\n')\n"
             "    return 1")
    with Sandbox(FAST, check_ast=False) as sandbox:
        out = sandbox.run([Job(forge, "f", (1,)), Job(INC, "f", (1,))])
        assert [o.kind for o in out] == ["crash", "ok"] and "protocol" in out[0].reason
        assert sandbox.stats["worker_restarts"] == 1


def test_close_kills_the_worker_and_the_worker_limits_are_reported():
    sandbox = Sandbox(FAST)
    still_works(sandbox)
    pid = sandbox.worker_pid
    info = sandbox.worker_info
    assert set(info["builtins"]) == ALLOWED_CALLS
    assert info["limits"]["RLIMIT_AS"][0] == 256 * 2**20 and info["limits"]["RLIMIT_FSIZE"] == [0, 0]
    sandbox.close()
    assert sandbox.worker_pid is None and reaped(pid)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_the_worker_dies_with_the_interpreter_even_without_close(tmp_path):
    script = ("from trmkit.rl.sandbox import Sandbox, Job\n"
              "s = Sandbox()\n"
              "assert s.run([Job('def f(x):\\n    return x', 'f', (1,))])[0].ok\n"
              "print(s.worker_pid)\n")
    done = procs.run([sys.executable, "-c", script], capture_output=True, text=True,
                     timeout=SAFETY_TIMEOUT, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.strip())
    status = f"/proc/{pid}/status"
    alive = os.path.exists(status) and "State:\tZ" not in open(status).read()
    assert not alive, f"worker {pid} outlived its interpreter"


def test_limits_are_checked():
    with pytest.raises(ValueError, match="twice cpu_seconds"):
        Limits(cpu_seconds=1.0, wall_seconds=1.5)
    with pytest.raises(ValueError, match="64 MiB"):
        Limits(memory_bytes=2**20)


def test_throughput_of_small_list_programs():
    jobs = [Job(REVERSE_SHIFT, "f", (list(range(i, i + 8)),)) for i in range(300)]
    with Sandbox() as sandbox:
        still_works(sandbox)  # start the worker outside the timing
        start = time.perf_counter()
        out = sandbox.run(jobs)
        rate = len(jobs) / (time.perf_counter() - start)
    assert all(o.ok for o in out) and out[5].value == [(v + 3) % 10 for v in range(5, 13)][::-1]
    print(f"\nsandbox throughput: {rate:.0f} jobs/s (each job runs twice)")
    assert rate > 20, f"{rate:.1f} jobs/s"
