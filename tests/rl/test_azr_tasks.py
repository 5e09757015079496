"""AZR tasks: prompts, answers read from a model's text, and scores by execution (a right answer of
each kind scores 1; a wrong one 0; an unparsable one 0 and counted)."""

import sys

import pytest

from trmkit.rl.azr.policy import AZR
from trmkit.rl.azr.tasks import (Answer, AzrScorer, AzrTask, Unparsable, induction_task, parse_answer,
                                 prompt, same_value, tasks_from)
from trmkit.rl.sandbox import Limits, Sandbox

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the sandbox needs POSIX")

PROGRAM = "from collections import Counter\ndef f(s, k):\n    return sorted(Counter(s).items())[:k]"
DEDUCTION = AzrTask("deduction", PROGRAM, ("'abca', 2",), ("[('a', 2), ('b', 1)]",))
ABDUCTION = AzrTask("abduction", PROGRAM, ("'abca', 2",), ("[('a', 2), ('b', 1)]",))
INDUCTION = induction_task("def f(xs):\n    return [x * x for x in xs]", ["[1]", "[2, 3]", "[]", "[4]"],
                           ["[1]", "[4, 9]", "[]", "[16]"], "square each")


@pytest.fixture(scope="module")
def scorer():
    with Sandbox(Limits(cpu_seconds=0.5, wall_seconds=3.0), policy=AZR) as box:
        yield AzrScorer(box)


def test_prompts_hold_the_task_and_the_answer_format():
    assert "f('abca', 2)" in prompt(DEDUCTION) and "<answer>" in prompt(DEDUCTION)
    assert "[('a', 2), ('b', 1)]" in prompt(ABDUCTION) and "def f(s, k)" in prompt(ABDUCTION)
    text = prompt(INDUCTION)
    assert "f([1]) == [1]" in text and "f([2, 3]) == [4, 9]" in text and "square each" in text
    assert "[16]" not in text and "x * x" not in text  # held back, and the program hidden


@pytest.mark.parametrize("text, kind, want", [
    ("so <answer>[1, 2]</answer>", "deduction", Answer("deduction", "[1, 2]", [1, 2])),
    ("<answer>1</answer> no wait\n```python\n(1, 'a')\n```", "deduction", Answer("deduction", "(1, 'a')", (1, "a"))),
    ("```python\n3\n``` then <answer>\n```python\n4\n```\n</answer>", "deduction", Answer("deduction", "4", 4)),
    ("<ANSWER>'abc', 3</ANSWER>", "abduction", Answer("abduction", "'abc', 3")),
    ("```\ndef f(x):\n    return x\n```", "induction", Answer("induction", "def f(x):\n    return x")),
])
def test_parse_answer_reads_the_last_answer(text, kind, want):
    assert parse_answer(text, kind) == want


@pytest.mark.parametrize("text, kind, words", [
    ("the answer is 4", "deduction", "no <answer>"),
    ("<answer>4</answer", "deduction", "no <answer>"),
    ("<answer>  </answer>", "deduction", "empty"),
    ("<answer>sorted(x)</answer>", "deduction", "not a Python literal"),
    ("<answer>1, 2) + (3</answer>", "abduction", "not the arguments"),
    ("```python\ndef g(x):\n    return x\n```", "induction", "defines no top-level function f"),
    ("```python\ndef f(x) return x\n```", "induction", "not Python"),
])
def test_unparsable_answers(text, kind, words):
    result = parse_answer(text, kind)
    assert isinstance(result, Unparsable) and words in result.reason


def test_right_answers_score_1(scorer):
    verdicts = scorer.score([
        (DEDUCTION, "Counting: a twice, b once. <answer>[('a', 2), ('b', 1)]</answer>"),
        (ABDUCTION, "<answer>'aab' + 'c', 2</answer>"),
        (INDUCTION, "```python\ndef f(xs):\n    return [x ** 2 for x in xs]\n```"),
    ])
    assert [(v.score, v.status) for v in verdicts] == [(1.0, "right")] * 3


def test_wrong_and_unparsable_answers_score_0_and_are_counted(scorer):
    scorer.counts.clear()
    verdicts = scorer.score([
        (DEDUCTION, "<answer>[['a', 2], ['b', 1]]</answer>"),  # lists, not tuples
        (ABDUCTION, "<answer>'abc', 2</answer>"),
        (INDUCTION, "I am not sure."),
        (DEDUCTION, "<answer>[('a', 2), </answer>"),
    ])
    assert [(v.score, v.status) for v in verdicts] == [(0.0, "wrong"), (0.0, "wrong"),
                                                       (0.0, "unparsable"), (0.0, "unparsable")]
    assert scorer.counts == {"wrong": 2, "unparsable": 2}


def test_induction_scores_the_held_back_pairs(scorer):
    half = "```python\ndef f(xs):\n    return [x * x for x in xs] if len(xs) != 1 or xs[0] < 4 else [0]\n```"
    [verdict] = scorer.score([(INDUCTION, half)])
    assert (verdict.score, verdict.status) == (0.5, "wrong")  # [] right, [4] wrong
    [verdict] = scorer.score([(INDUCTION, "```python\ndef f(xs):\n    return xs[10]\n```")])
    assert (verdict.score, verdict.status) == (0.0, "error") and "IndexError" in verdict.reason


def test_same_value_is_strict_about_types():
    assert same_value({"a": [1, (2,)]}, {"a": [1, (2,)]})
    assert not same_value(1, True) and not same_value(1, 1.0) and not same_value([1], (1,))


def test_a_scorer_needs_the_azr_policy():
    with pytest.raises(ValueError, match="policy"):
        AzrScorer(Sandbox())


def test_a_validated_program_gives_its_tasks():
    kinds = [t.kind for t in tasks_from(PROGRAM, ["'ab', 1", "'b', 1"], ["[('a', 1)]", "[('b', 1)]"], "count")]
    assert kinds == ["deduction", "abduction", "induction"]
    assert [t.kind for t in tasks_from(PROGRAM, ["'ab', 1"], ["[('a', 1)]"])] == ["deduction", "abduction"]
