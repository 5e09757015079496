"""Canonical SFT labels: each is an answer the checker accepts (run through the sandbox, as the checker
runs it) and minimal (no shorter or lexicographically smaller valid answer exists within the bound);
rl.sft_label=canonical puts them in seeding's targets."""

import random
from itertools import product

import pytest

from trmkit.config import Config
from trmkit.rl import programs as P
from trmkit.rl.canonical import Labeler
from trmkit.rl.config import RLConfig
from trmkit.rl.executor import Executor
from trmkit.rl.seed import SeedObjective

NAMES = [name for name, _ in P.STATEMENTS]
PAIRS = ((1, 2, 3), (5, 0, 7, 2), (9, 4), (3, 8, 6, 1, 0))


def prog(*names):
    return tuple(NAMES.index(n) for n in names)


@pytest.fixture(scope="module")
def labeler():
    return Labeler()


@pytest.fixture(scope="module")
def executor():
    ex = Executor()
    yield ex
    ex.close()


def task(labeler, kind, names, *inputs):
    t = P.CodeTask(kind, prog(*names), tuple(inputs))
    return P.CodeTask(kind, t.program, t.inputs, tuple(labeler.run(t.program, i) for i in t.inputs))


ABDUCTION = [  # (program, the generator's input, the canonical input)
    (("sort",), (3, 1, 2), (1, 2, 3)),  # the output is itself a valid input
    (("sort", "add1"), (3, 1, 2), (1, 2, 3)),  # (2, 3, 4): any order of 1, 2, 3 gives it; the smallest
    (("mul2",), (3, 8, 1), (3, 3, 1)),  # (6, 6, 2): 6 comes from 3 or 8, 2 from 1 or 6
    (("add1", "gt4"), (4, 5, 0), (4, 5)),  # (5, 6): the dropped item is not needed
    (("gt4", "cumsum"), (1, 7, 2, 9), (7, 9)),  # (7, 6)
    (("max6", "cumsum", "gt3"), (6, 6, 0), (0, 0, 0)),  # (6, 8): no two items >= 6 sum to 8 after a 6
]


@pytest.mark.parametrize("names, given, want", ABDUCTION)
def test_the_abduction_label_is_valid_and_the_smallest(labeler, executor, names, given, want):
    t = task(labeler, "abduction", names, given)
    label = labeler.answer(t)
    assert executor.check([(t, label)]) == [True]  # the checker's own verdict, through the sandbox
    assert_canonical(labeler, t, label)
    assert label == want


def assert_canonical(labeler, t, label):
    """The output itself where it is a valid input; else no shorter or lexicographically smaller list
    than the label gives the output."""
    out = t.outputs[0]
    assert labeler.run(t.program, label) == out
    if labeler.run(t.program, out) == out:
        assert label == out
        return
    for n in range(len(label) + 1):
        for x in product(range(10), repeat=n):
            if (n, x) < (len(label), label):
                assert labeler.run(t.program, x) != out, (t.program, label, x)


def test_random_abduction_labels_are_the_smallest(labeler):
    """Every statement family's backward rule against brute force: 200 random programs of 1 to 3
    statements on inputs of 1 to 3 items."""
    rng = random.Random(5)
    for _ in range(200):
        program = tuple(rng.randrange(len(P.STATEMENTS)) for _ in range(rng.randint(1, 3)))
        given = tuple(rng.randrange(10) for _ in range(rng.randint(1, 3)))
        t = P.CodeTask("abduction", program, (given,), (labeler.run(program, given),))
        assert_canonical(labeler, t, labeler.answer(t))


INDUCTION = [  # (the generator's program, the canonical program)
    (("reverse", "reverse", "add2"), ("add2",)),
    (("add1", "add1"), ("add2",)),
    (("sortd", "reverse"), ("sort",)),
    (("reverse", "add2"), ("reverse", "add2")),  # no one statement fits (test_heldout)
    (("add2", "reverse"), ("reverse", "add2")),  # the same function: the smaller statement indices first
]


@pytest.mark.parametrize("names, want", INDUCTION)
def test_the_induction_label_is_valid_and_the_shortest(labeler, executor, names, want):
    t = task(labeler, "induction", names, *PAIRS)
    label = labeler.answer(t)
    assert executor.check([(t, label)]) == [True]  # all four pairs, the hidden one too, in the sandbox
    fits = [p for n in range(1, len(label) + 1) for p in product(range(len(P.STATEMENTS)), repeat=n)
            if (n, p) < (len(label), label)
            and all(labeler.run(p, i) == o for i, o in zip(t.inputs, t.outputs))]
    assert not fits
    assert label == prog(*want)


def test_canonical_labels_are_seedings_targets():
    cfg = Config(sections={"rl": RLConfig(sft_label="canonical", heldout_per_type=2)})
    said = []
    obj = SeedObjective(cfg, log=said.append)
    try:
        assert any("sft_label=canonical" in s for s in said)
        t = task(obj.labeler, "abduction", ("sort", "add1"), (3, 1, 2))
        resp, answer = obj._solution(t)
        parsed = P.parse_solve(resp, "abduction")
        assert answer == parsed.answer == (1, 2, 3)
        assert parsed.trace[:2] == ((1, 2, 3), (2, 3, 4))  # the think slots trace the canonical input
        t = task(obj.labeler, "induction", ("add1", "add1"), *PAIRS)
        parsed = P.parse_solve(obj._solution(t)[0], "induction")
        assert parsed.answer == prog("add2") and parsed.trace[:2] == ((3, 4, 5), ())
        obj.labeler = None  # the default, rl.sft_label=generator: the generator's program
        assert P.parse_solve(obj._solution(t)[0], "induction").answer == prog("add1", "add1")
    finally:
        obj.close()


def test_sft_label_is_checked():
    with pytest.raises(Exception, match="sft_label"):
        RLConfig(sft_label="shortest")
