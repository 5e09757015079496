"""Tasks are completed, traced and checked by really executing them in the sandbox."""

import random

import pytest

from trmkit.rl import programs as P
from trmkit.rl.executor import Executor


@pytest.fixture(scope="module")
def ex():
    e = Executor(cache_bytes=2**20)
    yield e
    e.close()


def local(program, x):
    ns = {}
    exec(P.source(program), {"__builtins__": {"sorted": sorted, "sum": sum, "range": range, "len": len,
                                              "min": min, "max": max, "abs": abs}}, ns)
    return tuple(ns["f"](list(x)))


def test_sandbox_results_and_traces_match_python(ex):
    rng = random.Random(0)
    tasks = [P.random_task(rng, "deduction", 1, 5) for _ in range(60)]
    done = ex.complete(tasks)
    traces = ex.traces([(t.program, t.inputs[0]) for t in tasks])
    for t, d, tr in zip(tasks, done, traces):
        assert d.outputs[0] == local(t.program, t.inputs[0])
        assert len(tr) == len(t.program) and tr[-1] == d.outputs[0]
        assert tr[0] == local(t.program[:1], t.inputs[0])


def test_checks_accept_any_right_answer_and_use_the_hidden_pair(ex):
    rev, sort = P.TOKEN["s:reverse"] - P.STMT0, P.TOKEN["s:sort"] - P.STMT0
    ded = ex.complete([P.CodeTask("deduction", (rev,), ((1, 2, 3),))])[0]
    abd = ex.complete([P.CodeTask("abduction", (sort,), ((3, 1, 2),))])[0]
    assert ded.outputs == ((3, 2, 1),) and abd.outputs == ((1, 2, 3),)
    # abduction: any input that sorts to (1, 2, 3) is right, not only the proposer's
    assert ex.check([(ded, (3, 2, 1)), (ded, (1, 2, 3)), (abd, (2, 3, 1)), (abd, (1, 2))]) == \
        [True, False, True, False]
    # induction: the shown pairs agree with reverse and with sortd, the hidden 4th pair tells them apart
    sortd = P.TOKEN["s:sortd"] - P.STMT0
    ind = ex.complete([P.CodeTask("induction", (rev,), ((2, 1), (5, 3), (9, 0), (1, 2, 3)))])[0]
    assert ex.check([(ind, (rev,)), (ind, (sortd,)), (ind, (rev, rev, rev))]) == [True, False, True]


def test_cache_serves_repeats(ex):
    ex.cache.reset_counters()
    t = P.CodeTask("deduction", (0, 1), ((4, 5, 6),))
    ex.complete([t])
    jobs = ex.sandbox.stats["jobs"]
    ex.complete([t, t])
    assert ex.cache.hit_rate == 0.5 and ex.sandbox.stats["jobs"] == jobs  # the second call ran nothing
