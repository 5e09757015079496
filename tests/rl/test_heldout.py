"""The held-out set: each shortcut kind is tagged and left out of the headline, the difficulty search
finds the shortest program, and the stored set is the one its seed builds."""

import pytest

from trmkit.rl import heldout as H
from trmkit.rl import programs as P
from trmkit.rl.executor import Executor

NAMES = [name for name, _ in P.STATEMENTS]


def prog(*names):
    return tuple(NAMES.index(n) for n in names)


@pytest.fixture(scope="module")
def searcher():
    return H.Searcher()


def task(searcher, kind, names, *inputs):
    return searcher.complete(P.CodeTask(kind, prog(*names), tuple(inputs)))


PAIRS = ((1, 2, 3), (5, 0, 7, 2), (9, 4), (3, 8, 6, 1, 0))


@pytest.mark.parametrize("kind, names, inputs, cut", [
    ("deduction", ("gt8",), [(1, 2, 3)], "empty"),
    ("deduction", ("min1", "max1"), [(5, 0, 7)], "constant"),  # (1, 1, 1) whatever the three items
    ("deduction", ("sort",), [(1, 2, 3)], "copy"),
    ("deduction", ("add1",), [(1, 2, 3)], ""),
    ("abduction", ("sort", "add1"), [(3, 1, 2)], ""),
    ("abduction", ("sort",), [(3, 1, 2)], "copy"),  # the output (1, 2, 3) is a valid input
    ("induction", ("reverse", "reverse", "add2"), PAIRS, "one-statement"),  # add2 alone fits
    ("induction", ("reverse", "add2"), PAIRS, ""),
])
def test_each_shortcut_kind_is_tagged(searcher, kind, names, inputs, cut):
    assert searcher.shortcut(task(searcher, kind, names, *inputs)) == cut


def test_the_headline_leaves_every_shortcut_out(searcher):
    """Shortcut tasks all solved, the others all failed: the headline is 0, the shortcut slice 1."""
    items = [(t, searcher.tags(t)) for t in (
        task(searcher, "deduction", ("gt8",), (1, 2, 3)), task(searcher, "deduction", ("min1", "max1"), (5, 0, 7)),
        task(searcher, "deduction", ("sort",), (1, 2, 3)), task(searcher, "abduction", ("sort",), (3, 1, 2)),
        task(searcher, "induction", ("reverse", "reverse", "add2"), *PAIRS),
        task(searcher, "deduction", ("add1",), (1, 2, 3)), task(searcher, "abduction", ("sort", "add1"), (3, 1, 2)),
        task(searcher, "induction", ("reverse", "add2"), *PAIRS))]
    right = [bool(g.shortcut) for _, g in items]
    assert right == [True] * 5 + [False] * 3
    out = H.summarize(right, items)
    assert out["solve_rate"] == 5 / 8 and out["solve_rate/nontrivial"] == 0.0 and out["solve_rate/shortcut"] == 1.0
    assert out["samples/nontrivial"] == 3 and out["samples/deduction/shortcut"] == 3
    assert out["solve_rate/induction/nontrivial/se"] == 0.0
    assert out["samples/abduction+induction/nontrivial"] == 2  # the fair-SFT bar: both types' nontrivial tasks
    right[6] = True  # the nontrivial abduction task solved: half of the pair's nontrivial tasks
    assert H.summarize(right, items)["solve_rate/abduction+induction/nontrivial"] == 0.5


def test_depth_is_the_shortest_program(searcher):
    t = task(searcher, "deduction", ("reverse", "reverse", "add2"), (1, 2, 3))
    assert searcher.depth(t) == 1  # the same function as add2 alone
    assert searcher.depth(task(searcher, "deduction", ("reverse", "add2"), (1, 2, 3))) == 2
    assert searcher.depth(task(searcher, "induction", ("reverse", "add2"), *PAIRS)) == 2
    assert searcher.depth(task(searcher, "abduction", ("sort", "add1"), (3, 1, 2))) == 1  # add9 of the output
    assert searcher.depth(task(searcher, "abduction", ("sort",), (3, 1, 2))) == 0
    assert H.Tags("", 3).slice == "depth3+" and H.Tags("", 0).slice == "depth1"
    assert H.Tags("copy", 0).slice == "shortcut"


def test_the_stored_set_is_the_one_its_seed_builds():
    head, items = H.loads(H.STORED.read_text())
    assert head["seed"] == H.SEED and head["per_type"] >= 500 and len(items) == 3 * head["per_type"]
    assert len({t.key() for t, _ in items}) == len(items)
    again = H.build(H.SEED, 4)
    assert H.first(items, 4) == again
    assert H.for_config(H.SEED, 4, log=pytest.fail) == again  # read from the file, not rebuilt
    executor = Executor()  # the in-process outputs are the sandbox's
    try:
        assert executor.complete([t for t, _ in again]) == [t for t, _ in again]
    finally:
        executor.close()


def test_another_seed_is_built_in_memory_and_said():
    said = []
    items = H.for_config(H.SEED + 1, 2, log=said.append)
    assert len(items) == 6 and "built in memory" in said[0]
    assert items != H.first(H.loads(H.STORED.read_text())[1], 2)
